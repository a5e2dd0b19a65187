//! Slice names, each stored once: frames refer to them by number.

use std::collections::HashMap;

/// A name's number in [`Names`].
pub type Name = u32;

#[derive(Default)]
pub struct Names {
    all: Vec<Box<str>>,
    index: HashMap<Box<str>, Name>,
}

impl Names {
    /// The number of `name`, stored on first sight.
    pub fn intern(&mut self, name: &str) -> Name {
        if let Some(&n) = self.index.get(name) {
            return n;
        }
        let n = self.all.len() as Name;
        self.all.push(name.into());
        self.index.insert(name.into(), n);
        n
    }

    pub fn get(&self, n: Name) -> &str {
        &self.all[n as usize]
    }
}
