//! Drop-ins for libipt's two tools on the project's Intel PT decoder:
//! [`ptxed`] decodes a raw trace over raw code into instructions and events,
//! [`ptdump`] lists its packets; same options, same output. The `poketrace`
//! binary runs them as `poketrace ptxed` and `poketrace ptdump`.

mod c_number;
pub mod ptdump;
pub mod ptxed;
