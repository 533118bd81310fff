//! Dead-end cuts: values that can no longer appear, monotone bounds
//! already passed; and the bitset they (and the search) use.

/// Dense bitset with the few operations the search needs.
pub(super) struct Bits {
    w: Vec<u64>,
}

impl Bits {
    pub(super) fn new(n: usize) -> Bits {
        Bits {
            w: vec![0; n / 64 + 2],
        }
    }
    #[inline]
    pub(super) fn set(&mut self, i: u32) {
        self.w[(i >> 6) as usize] |= 1u64 << (i & 63);
    }
    #[inline]
    pub(super) fn clear(&mut self, i: u32) {
        self.w[(i >> 6) as usize] &= !(1u64 << (i & 63));
    }
    /// First index >= from whose bit is clear.
    #[inline]
    pub(super) fn next_zero(&self, from: u32) -> u32 {
        let mut wi = (from >> 6) as usize;
        let mut word = !self.w[wi] & (!0u64 << (from & 63));
        loop {
            if word != 0 {
                return (wi as u32) * 64 + word.trailing_zeros();
            }
            wi += 1;
            word = !self.w[wi];
        }
    }
    /// First index in `from..end` whose bit is set, or `end`.
    #[inline]
    pub(super) fn next_one(&self, from: u32, end: u32) -> u32 {
        if from >= end {
            return end;
        }
        let mut wi = (from >> 6) as usize;
        let mut word = self.w[wi] & (!0u64 << (from & 63));
        loop {
            if word != 0 {
                return ((wi as u32) * 64 + word.trailing_zeros()).min(end);
            }
            wi += 1;
            if wi >= self.w.len() || (wi as u32) * 64 >= end {
                return end;
            }
            word = self.w[wi];
        }
    }
    /// 32 bits starting at `pos`.
    #[inline]
    pub(super) fn get32(&self, pos: u32) -> u32 {
        let wi = (pos >> 6) as usize;
        let b = pos & 63;
        let mut v = self.w[wi] >> b;
        if b > 32 {
            v |= self.w[wi + 1] << (64 - b);
        }
        v as u32
    }
}

/// Tracks values that some remaining completed op needs to read but that are
/// neither current nor producible by any remaining op: such a configuration
/// is a dead end however the search continues, so it is cut at once instead
/// of being discovered when the reader is reached (which made early-placed,
/// silently overwritten writes cost time quadratic in their latency).
pub(super) struct Pruner {
    pub(super) enabled: bool,
    pub(super) need: Vec<u32>,
    pub(super) prod: Vec<u32>,
    pub(super) dead: u32,
}

impl Pruner {
    #[inline]
    pub(super) fn is_dead(&self, v: u32, cur: Option<u32>) -> bool {
        self.need[v as usize] > 0 && self.prod[v as usize] == 0 && cur != Some(v)
    }

    /// Removes (`add == false`) or restores an op's need/produce counts while
    /// the current value goes from `from` to `to`, keeping `dead` exact.
    #[inline]
    pub(super) fn apply(
        &mut self,
        need: Option<u32>,
        prod: Option<u32>,
        from: Option<u32>,
        to: Option<u32>,
        add: bool,
    ) {
        if !self.enabled {
            return;
        }
        let mut vs = [u32::MAX; 4];
        let mut k = 0;
        for v in [need, prod, from, to].into_iter().flatten() {
            if !vs[..k].contains(&v) {
                vs[k] = v;
                k += 1;
            }
        }
        for &v in &vs[..k] {
            if self.is_dead(v, from) {
                self.dead -= 1;
            }
        }
        if let Some(v) = need {
            let c = &mut self.need[v as usize];
            *c = if add { *c + 1 } else { *c - 1 };
        }
        if let Some(v) = prod {
            let c = &mut self.prod[v as usize];
            *c = if add { *c + 1 } else { *c - 1 };
        }
        for &v in &vs[..k] {
            if self.is_dead(v, to) {
                self.dead += 1;
            }
        }
    }
}

/// The monotone counterpart of `Pruner`: ops that need a never-decreasing
/// state bound (the fencing max token) to be at most some value. Once the
/// bound exceeds the smallest such need among remaining completed ops, the
/// configuration is a dead end.
pub(super) struct Bounds {
    /// Rank of each op's needed bound, `u32::MAX` if none.
    pub(super) rank: Vec<u32>,
    pub(super) vals: Vec<i64>,
    pub(super) cnt: Vec<u32>,
    pub(super) nonzero: Bits,
    pub(super) minr: u32,
}

impl Bounds {
    #[inline]
    pub(super) fn remove(&mut self, i: u32) {
        let r = self.rank[i as usize];
        if r == u32::MAX {
            return;
        }
        self.cnt[r as usize] -= 1;
        if self.cnt[r as usize] == 0 {
            self.nonzero.clear(r);
            if r == self.minr {
                self.minr = self.nonzero.next_one(r, self.vals.len() as u32);
            }
        }
    }
    #[inline]
    pub(super) fn restore(&mut self, i: u32) {
        let r = self.rank[i as usize];
        if r == u32::MAX {
            return;
        }
        self.cnt[r as usize] += 1;
        self.nonzero.set(r);
        self.minr = self.minr.min(r);
    }
    #[inline]
    pub(super) fn dead(&self, bound: Option<i64>) -> bool {
        match (bound, self.vals.get(self.minr as usize)) {
            (Some(b), Some(&need)) => b > need,
            _ => false,
        }
    }
}
