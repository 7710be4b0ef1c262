//! The info area's layout against the formulas `shmenv.infos` used before it took the
//! layout from here, and its parts: disjoint, inside the area, value cells on 8 bytes.

use super::*;

/// The layout as `shmenv.infos` computed it in Python: `(size, [(name, offset)])`.
fn python_formulas(workers: usize, stride: usize) -> (usize, Vec<(&'static str, usize)>) {
    let n = workers * stride;
    let n8 = n.div_ceil(8) * 8;
    let tables = 2 * n8;
    let entries = tables + 8 * workers.div_ceil(8);
    let columns = entries + workers * 16 * 64;
    let slot_bytes = 2 * 8 * n + 2 * n8;
    let size = 2 * n8 + 8 * workers.div_ceil(8) + workers * 16 * 64 + 16 * (16 * n + 2 * n8);
    let fields = vec![
        ("cells", n),
        ("pickled", n8),
        ("counts", tables),
        ("entries", entries),
        ("columns", columns),
        ("slot_bytes", slot_bytes),
        ("presence", n8),
        ("slots", 16),
        ("entry", 64),
        ("name", 48),
    ];
    (size, fields)
}

#[test]
fn layout_is_the_one_python_computed() {
    for workers in 0..40 {
        for stride in 0..40 {
            let layout = InfoLayout::new(workers, stride).unwrap();
            let (size, fields) = python_formulas(workers, stride);
            assert_eq!(layout.size(), size, "{workers} x {stride}");
            let ours = layout.fields();
            for (name, value) in fields {
                assert!(
                    ours.contains(&(name, value)),
                    "{workers} x {stride}: {name} is not {value}: {ours:?}"
                );
            }
            let n = workers * stride;
            for pos in 0..n {
                for slot in 0..SLOTS {
                    // Python: `_cell(slot, kind) + 8 * pos` and `_cell(slot, 0) + 16 n + kind n8 + pos`.
                    let cell = |kind: usize| layout.slot(slot) + kind * 8 * n;
                    assert_eq!(layout.value(slot, false, pos), Some(cell(0) + 8 * pos));
                    assert_eq!(layout.value(slot, true, pos), Some(cell(1) + 8 * pos));
                    let n8 = n.div_ceil(8) * 8;
                    assert_eq!(layout.presence(slot, true, pos), Some(cell(0) + 16 * n + n8 + pos));
                }
            }
        }
    }
}

#[test]
fn two_workers_of_two_envs() {
    let layout = InfoLayout::new(2, 2).unwrap();
    let expected = [
        ("workers", 2),
        ("stride", 2),
        ("cells", 4),
        ("size", 3352),
        ("pickled", 8),
        ("counts", 16),
        ("entries", 24),
        ("columns", 24 + 2 * 16 * 64),
        ("slot_bytes", 80),
        ("reset_values", 32),
        ("presence_at", 64),
        ("presence", 8),
        ("slots", 16),
        ("entry", 64),
        ("name", 48),
        ("cell", 8),
    ];
    assert_eq!(layout.fields(), expected);
    assert_eq!(layout.position(1, 1), Some(3));
    assert_eq!(layout.position(1, 2), None);
    assert_eq!(layout.position(2, 0), None);
}

/// Every byte the layout gives out, with what it is.
fn parts(layout: &InfoLayout) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for pos in 0..layout.cells() {
        out.push((layout.flag(pos).unwrap(), 1, format!("flag {pos}")));
        out.push((layout.pickled(pos).unwrap(), 1, format!("pickled {pos}")));
        for slot in 0..SLOTS {
            for reset in [false, true] {
                out.push((
                    layout.value(slot, reset, pos).unwrap(),
                    CELL_BYTES,
                    format!("value {slot} {reset} {pos}"),
                ));
                out.push((
                    layout.presence(slot, reset, pos).unwrap(),
                    1,
                    format!("presence {slot} {reset} {pos}"),
                ));
            }
        }
    }
    for w in 0..layout.workers() {
        out.push((layout.count(w).unwrap(), 1, format!("count {w}")));
        for slot in 0..SLOTS {
            out.push((layout.entry(w, slot).unwrap(), ENTRY_BYTES, format!("entry {w} {slot}")));
        }
    }
    out
}

#[test]
fn parts_are_disjoint_inside_the_area_and_cells_aligned() {
    for (workers, stride) in [(1, 1), (1, 7), (3, 5), (9, 1), (2, 64), (17, 3)] {
        let layout = InfoLayout::new(workers, stride).unwrap();
        let mut all = parts(&layout);
        all.sort();
        for pair in all.windows(2) {
            let ((a, len, what), (b, _, next)) = (&pair[0], &pair[1]);
            assert!(a + len <= *b, "{workers} x {stride}: {what} overlaps {next}");
        }
        let (last, len, _) = all.last().unwrap();
        assert!(last + len <= layout.size());
        assert!(all.iter().filter(|p| p.2.starts_with("value")).all(|p| p.0 % CELL_BYTES == 0));
    }
}

#[test]
fn indices_outside_the_layout_have_no_offset() {
    let layout = InfoLayout::new(2, 3).unwrap();
    assert_eq!(layout.flag(6), None);
    assert_eq!(layout.pickled(usize::MAX), None);
    assert_eq!(layout.count(2), None);
    assert_eq!(layout.entry(1, SLOTS), None);
    assert_eq!(layout.entry(2, 0), None);
    assert_eq!(layout.value(SLOTS, false, 0), None);
    assert_eq!(layout.value(0, true, 6), None);
    assert_eq!(layout.presence(usize::MAX, true, 0), None);
    assert_eq!(layout.presence(0, false, usize::MAX), None);
}

#[test]
fn a_layout_past_usize_is_refused() {
    for (workers, stride) in [(usize::MAX, 2), (1 << 40, 1 << 40), (usize::MAX / 64, 1), (1, usize::MAX / 8)]
    {
        let e = InfoLayout::new(workers, stride).unwrap_err();
        assert_eq!(e, InfoAreaError::TooLarge { workers, stride });
        let text = e.to_string();
        assert!(
            text.contains(&format!("{workers} workers of {stride} envs")) && text.contains("fewer"),
            "{text}"
        );
    }
}

#[test]
fn column_dtypes_are_native_numbers_of_up_to_8_bytes() {
    let native = if cfg!(target_endian = "little") { '<' } else { '>' };
    for dtype in DType::ALL {
        let kind = numpy_kind(dtype);
        for order in [native, '|', '='] {
            assert_eq!(column_dtype(&format!("{order}{kind}{}", dtype.size())), Some(dtype));
        }
    }
    let foreign = if native == '<' { ">i8" } else { "<i8" };
    for bad in ["", "<", "<i", "<i16", "<c16", "<c8", foreign, "<b2", "<U8", "<f8x", "<f 4", "xi8", "<ii8"] {
        assert_eq!(column_dtype(bad), None, "{bad}");
    }
}
