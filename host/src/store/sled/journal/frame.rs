//! The journal's frames on disk.
//!
//! Format 2: `magic "SYJ" | version 2 | length u32 | sequence u64 | synced
//! u64 | crc32 u32 | payload`, little-endian, the CRC over everything
//! after the magic; a payload is `json length u32 | JSON | body bytes`.
//! The magic keeps zero-filled or garbage bytes from reading as a frame;
//! the sequence (one more than the frame before, across segments) keeps
//! stale bytes from reading as new ones; `synced` says that every frame
//! numbered below it was durable when this one was written, which is how
//! recovery tells damage from a torn end (`mod.rs`, `replay`).
//!
//! Format 1 (before 2026-11-28): `length u32 | crc32 u32 | payload`, no
//! magic, no sequence. Segments written so are still read.

/// The magic and the format version: every format-2 frame starts so.
pub const MAGIC: [u8; 4] = *b"SYJ\x02";

/// Bytes before the payload.
pub const HEADER: usize = 28;

/// Bytes before a format-1 frame's payload.
pub const HEADER_V1: usize = 8;

/// The largest payload, written or read: the writer refuses a larger
/// record, so the reader never meets a frame it would refuse.
pub const MAX_PAYLOAD: usize = 1 << 30;

/// One frame read off the start of some bytes.
#[derive(Debug)]
pub enum Read<'a> {
    /// A whole, checked frame: its sequence, payload and length.
    Frame {
        seq: u64,
        synced: u64,
        payload: &'a [u8],
        len: usize,
    },
    /// No bytes left.
    End,
    /// Bytes that are not a whole frame, and why.
    Bad(&'static str),
}

/// Appends one frame of `json` and `body`, numbered `seq`, to `out`;
/// returns its length, or `None` when the payload is over [`MAX_PAYLOAD`].
pub fn encode(out: &mut Vec<u8>, seq: u64, synced: u64, json: &[u8], body: &[u8]) -> Option<usize> {
    let payload = 4 + json.len() + body.len();
    if payload > MAX_PAYLOAD {
        return None;
    }
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(payload as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&synced.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(json);
    out.extend_from_slice(body);
    let crc = checksum(&out[start + 4..start + 24], &out[start + HEADER..]);
    out[start + 24..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    Some(out.len() - start)
}

fn checksum(head: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(head);
    hasher.update(payload);
    hasher.finalize()
}

/// The frame at the start of `bytes`, checked.
pub fn decode(bytes: &[u8]) -> Read<'_> {
    if bytes.is_empty() {
        return Read::End;
    }
    let Some(head) = bytes.get(..HEADER) else {
        return Read::Bad("a frame header cut short");
    };
    if head[..4] != MAGIC {
        return Read::Bad("no frame starts here (wrong magic or format version)");
    }
    let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
    let seq = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    let synced = u64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(head[24..28].try_into().expect("4 bytes"));
    if len > MAX_PAYLOAD {
        return Read::Bad("a frame length beyond the limit");
    }
    let Some(payload) = bytes.get(HEADER..HEADER + len) else {
        return Read::Bad("a frame cut short");
    };
    if checksum(&head[4..24], payload) != crc {
        return Read::Bad("a frame whose checksum does not match");
    }
    Read::Frame {
        seq,
        synced,
        payload,
        len: HEADER + len,
    }
}

/// A format-1 frame at the start of `bytes`; its numbers are 0.
pub fn decode_v1(bytes: &[u8]) -> Read<'_> {
    if bytes.is_empty() {
        return Read::End;
    }
    let Some(head) = bytes.get(..HEADER_V1) else {
        return Read::Bad("a frame header cut short");
    };
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    if len > 64 << 20 {
        return Read::Bad("a frame length beyond the limit");
    }
    let Some(payload) = bytes.get(HEADER_V1..HEADER_V1 + len) else {
        return Read::Bad("a frame cut short");
    };
    if len == 0 || crc32fast::hash(payload) != crc {
        return Read::Bad("a frame whose checksum does not match");
    }
    Read::Frame {
        seq: 0,
        synced: 0,
        payload,
        len: HEADER_V1 + len,
    }
}

/// The JSON and body of a frame's payload.
pub fn split(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let json_len = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
    let json = payload.get(4..4 + json_len)?;
    Some((json, &payload[4 + json_len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_whole_and_not_cut_or_flipped() {
        let mut out = Vec::new();
        let len = encode(&mut out, 7, 3, b"{\"a\":1}", b"\x00\xffbody").unwrap();
        assert_eq!(len, out.len());
        let Read::Frame {
            seq,
            synced,
            payload,
            len: read,
        } = decode(&out)
        else {
            panic!("not read back");
        };
        assert_eq!((seq, synced, read), (7, 3, len));
        assert_eq!(
            split(payload).unwrap(),
            (&b"{\"a\":1}"[..], &b"\x00\xffbody"[..])
        );
        for cut in 1..out.len() {
            assert!(matches!(decode(&out[..cut]), Read::Bad(_)), "cut at {cut}");
        }
        for at in 0..out.len() {
            let mut flipped = out.clone();
            flipped[at] ^= 0x40;
            assert!(matches!(decode(&flipped), Read::Bad(_)), "flipped at {at}");
        }
    }

    #[test]
    fn zeros_are_not_a_frame() {
        assert!(matches!(decode(&[0; 64]), Read::Bad(_)));
        assert!(matches!(decode_v1(&[0; 64]), Read::Bad(_)));
    }
}
