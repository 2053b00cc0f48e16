//! The component's allocator: a bump pointer that frees nothing until
//! everything is freed.
//!
//! Freeing memory block by block only costs time in a call this short. When
//! the last live block is freed (at the end of a call, once the host has read
//! the result) the arena starts over, so an instance the host keeps for the
//! team's next call does not grow with every call. Allocation starts in the heap the linker
//! leaves between `__heap_base` and `__heap_end` (the end of the initial
//! memory, sized in `plugins/.cargo/config.toml`), so a typical render never
//! grows its memory: in the host's pooled instances a `memory.grow` adds about
//! 4 µs to a call and to the next instantiation, against a whole render of
//! about 15 µs. Past `__heap_end` it grows the memory as any allocator would,
//! up to the plugin's memory cap.
//!
//! Only for `wasm32-unknown-unknown`, where nothing else (no libc `malloc`)
//! claims that heap.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

const PAGE: usize = 64 << 10;

unsafe extern "C" {
    static __heap_base: u8;
    static __heap_end: u8;
}

struct Arena {
    /// The next free byte; 0 until the first allocation.
    next: Cell<usize>,
    /// Blocks allocated and not yet freed.
    live: Cell<usize>,
    /// One past the last usable byte.
    end: Cell<usize>,
}

// SAFETY: wasm32-unknown-unknown without the atomics feature has one thread.
unsafe impl Sync for Arena {}

#[global_allocator]
static ARENA: Arena = Arena {
    next: Cell::new(0),
    live: Cell::new(0),
    end: Cell::new(0),
};

impl Arena {
    /// Moves `end` past `needed`, growing the memory; false if it cannot.
    fn reach(&self, needed: usize) -> bool {
        let pages = (needed - self.end.get()).div_ceil(PAGE);
        let previous = core::arch::wasm32::memory_grow(0, pages);
        if previous == usize::MAX {
            return false;
        }
        self.end.set((previous + pages) * PAGE);
        true
    }
}

unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.next.get() == 0 {
            self.next.set(&raw const __heap_base as usize);
            self.end.set(&raw const __heap_end as usize);
        }
        let start = self.next.get().next_multiple_of(layout.align());
        let Some(end) = start.checked_add(layout.size()) else {
            return std::ptr::null_mut();
        };
        if end > self.end.get() && !self.reach(end) {
            return std::ptr::null_mut();
        }
        self.next.set(end);
        self.live.set(self.live.get() + 1);
        start as *mut u8
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {
        let live = self.live.get().saturating_sub(1);
        self.live.set(live);
        if live == 0 {
            self.next.set(&raw const __heap_base as usize);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The newest allocation (a growing output string, typically) grows in place.
        let start = ptr as usize;
        if start + layout.size() == self.next.get()
            && let Some(end) = start.checked_add(new_size)
            && (end <= self.end.get() || self.reach(end))
        {
            self.next.set(end);
            return ptr;
        }
        // SAFETY: `layout.align()` is a valid alignment and the caller
        // guarantees `new_size`, rounded up to it, does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live and distinct; the copy stays within both.
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
            // SAFETY: the old block was allocated here and is no longer used.
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}
