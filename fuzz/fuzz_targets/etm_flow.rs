//! Decodes arbitrary bytes as ETMv4 trace into trace elements, over code
//! taken from the input too, under a configuration chosen by the first
//! bytes (speculation depth, return stack, cycle counts, WFI/WFE as P0,
//! framing). Any panic, unbounded output, element outside the trace, range
//! whose size disagrees with its instruction count, error not followed by
//! NO_SYNC, or source without exactly one EO_TRACE, is a bug.
#![no_main]

use codeimage::window::Static;
use codeimage::{BaseImage, TimelineBuilder};
use etm::flow::{self, ElemKind, Element, FlowDecoder, FlowError, Item, UnsyncReason};
use etm::{Container, ErrorRecovery, EtmV4Config, Framing, PacketReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&[cfg, mode], rest)) = input.split_first_chunk::<2>() else {
        return;
    };
    // Up to 256 bytes of code at 0x1000 and again just below the top of the address space.
    let code_len = (rest.len() / 2).min(256) & !3;
    let (code, data) = rest.split_at(code_len);
    let mut base = BaseImage::new();
    base.add_bytes(0x1000, code.to_vec(), "low");
    base.add_bytes(0xffff_ffff_ffff_fe00, code.to_vec(), "top");
    let code = TimelineBuilder::new(base).build();

    let config = EtmV4Config {
        configr: 0x1 | ((cfg & 1) as u32) << 12 | ((cfg >> 1 & 1) as u32) << 4 | ((cfg >> 2 & 1) as u32) << 11,
        traceidr: 0x10,
        idr0: 0x28000EA1 | 0x200,
        idr1: 0x4100F430,
        idr2: 0x488 | ((cfg >> 3 & 1) as u32) << 31,
        idr8: [0, 1, 4, 0x20][(cfg >> 4 & 3) as usize],
        ..EtmV4Config::default()
    };
    let configs = [config, EtmV4Config { traceidr: 0x11, ..config }];
    let framing = if mode & 1 == 0 { Framing::Raw { trace_id: 0x10 } } else { Framing::Aligned { reset_on_4x_fsync: mode & 2 != 0 } };
    let recovery = if mode & 4 != 0 { ErrorRecovery::Continue } else { ErrorRecovery::Resync };
    let sources: &[EtmV4Config] = if mode & 1 == 0 { &configs[..1] } else { &configs };

    let mut reader = PacketReader::with_container(data, Container::Plain, framing, sources, recovery);
    let mut decoder = FlowDecoder::for_buffer(Static(&code), framing, sources);
    let mut elems: Vec<Element> = Vec::new();
    flow::run(&mut reader, &mut decoder, |item| {
        if let Item::Element(e) = item {
            elems.push(*e);
        }
    });

    assert!(elems.len() <= 50 * data.len() + 10, "{} elements from {} bytes", elems.len(), data.len());
    for (i, e) in elems.iter().enumerate() {
        assert!(e.index <= data.len() as u64, "{e:?} outside the trace");
        match e.kind {
            ElemKind::InstrRange(r) => {
                assert!(r.num_i > 0 && r.end.wrapping_sub(r.start) == 4 * r.num_i as u64, "{r:?}")
            }
            ElemKind::Error(err) if !matches!(err, FlowError::UnsupportedIsa { .. }) => {
                let next = elems[i + 1..].iter().find(|x| x.trace_id == e.trace_id).map(|x| x.kind);
                assert!(
                    matches!(next, Some(ElemKind::NoSync(UnsyncReason::BadPacket | UnsyncReason::ResetDecoder)) | Some(ElemKind::EoTrace(_))),
                    "{err} followed by {next:?}"
                );
            }
            _ => {}
        }
    }
    for s in sources {
        let ends = elems.iter().filter(|e| e.trace_id == s.trace_id() && matches!(e.kind, ElemKind::EoTrace(_))).count();
        assert_eq!(ends, 1, "trace ID {:#x}", s.trace_id());
    }
});
