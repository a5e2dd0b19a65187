//! The return stack the walk keeps for return compression.

/// Return addresses kept for return compression: the SDM's decoder keeps
/// the youngest 64 (the processor compresses no deeper), which also bounds
/// what a trial copies.
const RETURN_STACK: usize = 64;

/// The youngest [`RETURN_STACK`] return addresses, in a ring: a push onto a
/// full stack drops the oldest.
#[derive(Clone, Copy)]
pub(super) struct ReturnStack {
    addrs: [u64; RETURN_STACK],
    /// Where the next push goes.
    top: usize,
    len: usize,
}

impl Default for ReturnStack {
    fn default() -> Self {
        ReturnStack { addrs: [0; RETURN_STACK], top: 0, len: 0 }
    }
}

impl ReturnStack {
    #[inline(always)]
    pub fn push(&mut self, ip: u64) {
        self.addrs[self.top] = ip;
        self.top = (self.top + 1) % RETURN_STACK;
        self.len = (self.len + 1).min(RETURN_STACK);
    }

    pub fn pop(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        self.top = (self.top + RETURN_STACK - 1) % RETURN_STACK;
        Some(self.addrs[self.top])
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}
