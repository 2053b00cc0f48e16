//! The journal's frames on disk: `length u32 | crc32 u32 | payload`,
//! little-endian, the CRC over the payload; a payload is
//! `json length u32 | JSON | body bytes`. A frame is valid only whole and
//! with its CRC, so a write cut short (a crash, a full disk) or a flipped
//! byte shows as the end of the valid data.

/// Bytes before the payload.
pub const HEADER: usize = 8;

/// The largest payload read back: a length beyond it is damage, not data.
const MAX_PAYLOAD: usize = 64 << 20;

/// Appends one frame of `json` and `body` to `out`; returns its length.
pub fn encode(out: &mut Vec<u8>, json: &[u8], body: &[u8]) -> usize {
    let start = out.len();
    let payload = 4 + json.len() + body.len();
    out.extend_from_slice(&(payload as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(json);
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out[start + HEADER..]);
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    out.len() - start
}

/// The JSON and body of a frame's payload.
pub fn split(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let json_len = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
    let json = payload.get(4..4 + json_len)?;
    Some((json, &payload[4 + json_len..]))
}

/// The payload of the frame at the start of `bytes`, checked, and the
/// frame's length; `None` if it is cut short or damaged.
pub fn decode(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..HEADER)?.try_into().ok()?);
    if len > MAX_PAYLOAD {
        return None;
    }
    let payload = bytes.get(HEADER..HEADER + len)?;
    (crc32fast::hash(payload) == crc).then_some((payload, HEADER + len))
}

/// The payload of a frame read back from a known place, unchecked: it was
/// checked when the journal was read at start, or written by this process.
pub fn payload(frame: &[u8]) -> &[u8] {
    frame.get(HEADER..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_whole_and_not_cut_or_flipped() {
        let mut out = Vec::new();
        let len = encode(&mut out, b"{\"a\":1}", b"\x00\xffbody");
        assert_eq!(len, out.len());
        let (payload, read) = decode(&out).unwrap();
        assert_eq!(read, len);
        assert_eq!(
            split(payload).unwrap(),
            (&b"{\"a\":1}"[..], &b"\x00\xffbody"[..])
        );
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_none(), "cut at {cut}");
        }
        for at in 0..out.len() {
            let mut flipped = out.clone();
            flipped[at] ^= 0x40;
            assert!(decode(&flipped).is_none(), "flipped at {at}");
        }
    }
}
