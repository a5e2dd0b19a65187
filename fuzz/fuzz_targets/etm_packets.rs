//! Decodes arbitrary bytes as a CoreSight trace buffer of ETMv4 sources,
//! under a framing, container, configuration and error recovery chosen by
//! the first bytes. Any panic, endless stream, fault reported outside the
//! trace, empty or oversized packet, packet after a fault before the next
//! A-sync (with `ErrorRecovery::Resync`), or difference between decoding the
//! buffer in one block and in two, is a bug.
#![no_main]

use etm::packet::Packet;
use etm::stream::Input;
use etm::{Container, ErrorRecovery, EtmV4Config, Framing, PacketReader, PacketStream, Profile};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, PartialEq)]
enum Item {
    Packet(u8, u64, Packet, Vec<u8>),
    Frame(etm::FrameError),
}

fn item(r: Result<etm::TracePacket<'_>, etm::FrameError>) -> Item {
    match r {
        Ok(p) => Item::Packet(p.trace_id, p.index, p.packet, p.raw.to_vec()),
        Err(e) => Item::Frame(e),
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&[mode, cfg, split], data)) = input.split_first_chunk::<3>() else {
        return;
    };
    let framing = match mode & 3 {
        0 => Framing::Raw { trace_id: 0x10 },
        1 => Framing::Aligned { reset_on_4x_fsync: mode & 4 != 0 },
        _ => Framing::Synced { hsyncs: mode & 4 != 0 },
    };
    let container = if mode & 8 != 0 && framing != (Framing::Raw { trace_id: 0x10 }) { Container::Dstream } else { Container::Plain };
    let recovery = if mode & 16 != 0 { ErrorRecovery::Continue } else { ErrorRecovery::Resync };
    // Configurations switching on and off every optional packet and field size.
    let base = EtmV4Config {
        configr: if cfg & 1 != 0 { 0x1 | 0x6 | (1 << 4) | (7 << 8) | (3 << 16) } else { 0xC1 },
        idr0: 0x28000EA1 | if cfg & 2 != 0 { 0x18 | 0x40 | (3 << 15) } else { 0 } | if cfg & 4 != 0 { 0 } else { 0x2000_0000 },
        idr1: if cfg & 8 != 0 { 0x4200F440 } else { 0x4100F403 },
        idr2: 0x8 | (((cfg >> 4) & 1) as u32 * 4) << 5 | [0, 1, 2, 4][((cfg >> 5) & 3) as usize] << 10,
        idr8: (cfg & 0x80 != 0) as u32 * 0x20,
        profile: if cfg & 0x40 != 0 { Profile::M } else { Profile::A },
        ..EtmV4Config::default()
    };
    let configs: Vec<EtmV4Config> = [0x10u32, 0x11, 0x22].iter().map(|&id| EtmV4Config { traceidr: id, ..base }).collect();
    let trace_len: u64 = match container {
        Container::Plain => data.len() as u64,
        Container::Dstream => data.chunks(512).map(|b| b.len().min(504) as u64).sum(),
    };

    let mut r = PacketReader::with_container(data, container, framing, &configs, recovery);
    let mut items = Vec::new();
    let mut lost = [false; 128];
    while let Some(i) = r.next() {
        let i = item(i);
        assert!(items.len() <= data.len() + 130, "the stream does not end");
        match &i {
            Item::Frame(e) => {
                assert!(e.offset <= trace_len, "{e} past the end");
                lost = [true; 128];
            }
            Item::Packet(id, index, packet, raw) => {
                assert!(*index <= trace_len && !raw.is_empty() && raw.len() <= etm::decode::MAX_PACKET_LEN, "{i:?}");
                let id = *id as usize & 0x7F;
                if recovery == ErrorRecovery::Resync {
                    match packet {
                        Packet::Async => lost[id] = false,
                        Packet::NotSync { .. } | Packet::IncompleteEot { .. } => {}
                        p if lost[id] && !p.is_error() => {
                            panic!("{p:?} before an A-sync after a fault")
                        }
                        _ => {}
                    }
                    lost[id] |= packet.is_error();
                }
            }
        }
        items.push(i);
    }

    // The same trace in two blocks (plain container: the blocks are the buffer's halves).
    if container == Container::Plain {
        let cut = (split as usize * data.len()) / 255;
        let mut s = PacketStream::new(framing, &configs, recovery);
        let mut again = Vec::new();
        for (bytes, base) in [(&data[..cut], 0u64), (&data[cut..], cut as u64)] {
            let mut input = Input::new(bytes, base);
            while let Some(i) = s.next(&mut input) {
                again.push(item(i));
            }
        }
        while let Some(i) = s.finish() {
            again.push(item(i));
        }
        assert_eq!(again, items, "decoding in two blocks differs");
    }
});
