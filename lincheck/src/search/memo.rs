//! The set of visited configurations and the hash-consed sets of
//! linearized never-returned ops it refers to.

use super::NIL;
use hashbrown::HashTable;

/// Memo entries with the same returned-op part compared per lookup.
const CHAIN_BUDGET: u32 = 8;

struct Entry<S> {
    hash: u64,
    state: S,
    p: u32,
    off: u32,
    len: u32,
    /// Set of never-returned ops linearized so far (id in `DSets`).
    d: u32,
    /// Next entry with the same (p, window bits, state), or NIL.
    next: u32,
}

/// Hash-consed sets of linearized never-returned ops. They change only when
/// such an op is linearized, so transitions are cached.
pub(super) struct DSets {
    sets: Vec<Box<[u32]>>,
    ids: rustc_hash::FxHashMap<Box<[u32]>, u32>,
    trans: rustc_hash::FxHashMap<(u32, u32), u32>,
}

impl DSets {
    pub(super) fn new() -> DSets {
        let mut ids = rustc_hash::FxHashMap::default();
        ids.insert(Box::from([] as [u32; 0]), 0);
        DSets {
            sets: vec![Box::from([] as [u32; 0])],
            ids,
            trans: Default::default(),
        }
    }

    #[inline]
    pub(super) fn add(&mut self, d: u32, q: u32) -> u32 {
        if let Some(&t) = self.trans.get(&(d, q)) {
            return t;
        }
        let mut v = self.sets[d as usize].to_vec();
        let pos = v.partition_point(|&x| x < q);
        v.insert(pos, q);
        let id = match self.ids.get(v.as_slice()) {
            Some(&id) => id,
            None => {
                let id = self.sets.len() as u32;
                let b: Box<[u32]> = v.into();
                self.ids.insert(b.clone(), id);
                self.sets.push(b);
                id
            }
        };
        self.trans.insert((d, q), id);
        id
    }

    /// Is set `a` a subset of set `b`?
    #[inline]
    pub(super) fn subset(&self, a: u32, b: u32) -> bool {
        if a == b || a == 0 {
            return true;
        }
        let (x, y) = (&self.sets[a as usize], &self.sets[b as usize]);
        if x.len() > y.len() {
            return false;
        }
        let mut j = 0;
        for &e in x.iter() {
            while j < y.len() && y[j] < e {
                j += 1;
            }
            if j == y.len() || y[j] != e {
                return false;
            }
            j += 1;
        }
        true
    }
}

/// Set of visited configurations. Window bitsets live in one arena, so an
/// entry costs a few words plus the window.
///
/// Never-returned ops carry no obligation, so a configuration with fewer of
/// them linearized (and otherwise equal) can do everything one with more
/// can: a configuration is skipped if a visited one differs only by a subset
/// of linearized never-returned ops. Without this the search is exponential
/// in the number of concurrent never-returned writes.
pub(super) struct Memo<S> {
    table: HashTable<u32>,
    entries: Vec<Entry<S>>,
    arena: Vec<u32>,
    /// Configurations recorded by overwriting a dominated variant.
    replaced: u64,
}

impl<S: Eq + Clone> Memo<S> {
    /// A valid history visits about one configuration per op, so sizing
    /// for that avoids most rehashing.
    pub(super) fn with_capacity(n: usize) -> Self {
        Memo {
            table: HashTable::with_capacity(n),
            entries: Vec::with_capacity(n),
            arena: Vec::with_capacity(n),
            replaced: 0,
        }
    }

    /// Returns true if the configuration is not dominated by a visited one
    /// (and records it). Inlined into the search loop as it was before the
    /// split into modules: as a call it cost ~8% of a 1M-op check.
    #[inline]
    pub(super) fn insert(
        &mut self,
        hash: u64,
        state: &S,
        p: u32,
        key: &[u32],
        d: u32,
        ds: &DSets,
    ) -> bool {
        let entries = &self.entries;
        let arena = &self.arena;
        let found = self.table.find(hash, |&idx| {
            let e = &entries[idx as usize];
            e.hash == hash
                && e.p == p
                && e.len as usize == key.len()
                && e.state == *state
                && arena[e.off as usize..(e.off + e.len) as usize] == *key
        });
        let idx = self.entries.len() as u32;
        if let Some(&head) = found {
            // A variant that the new one dominates is overwritten rather than
            // kept, so chains stay short antichains. The walk is still
            // bounded: missing a dominating entry costs repeated work, never
            // a wrong verdict.
            let mut k = head;
            let mut budget = CHAIN_BUDGET;
            while k != NIL && budget > 0 {
                let e = &self.entries[k as usize];
                if ds.subset(e.d, d) {
                    return false;
                }
                if ds.subset(d, e.d) {
                    self.entries[k as usize].d = d;
                    self.replaced += 1;
                    return true;
                }
                k = e.next;
                budget -= 1;
            }
            let h = &self.entries[head as usize];
            let e = Entry {
                hash,
                state: state.clone(),
                p,
                off: h.off,
                len: h.len,
                d,
                next: h.next,
            };
            self.entries.push(e);
            self.entries[head as usize].next = idx;
            return true;
        }
        let off = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        self.entries.push(Entry {
            hash,
            state: state.clone(),
            p,
            off,
            len: key.len() as u32,
            d,
            next: NIL,
        });
        let entries = &self.entries;
        self.table
            .insert_unique(hash, idx, |&i| entries[i as usize].hash);
        true
    }

    /// Configurations recorded (including overwritten variants).
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.entries.len() + self.replaced as usize
    }
}
