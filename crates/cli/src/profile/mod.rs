//! `poketrace profile`: profiles of a trace for the tools that optimise
//! code from them. (On this branch only the perf-inject format.)

pub mod inject;
mod staging;

use clap::ValueEnum;

/// What `profile` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A perf.data with a branch-stack sample every --period instructions (`perf inject --itrace=il64`).
    PerfInject,
}
