//! Property-based fuzzing of the trainer's read of the info area of hosted Python envs
//! (`shmenv_engine::protocol::infos`), whose bytes the workers write: any bytes, key
//! tables and rows are read into values or a typed error, never a panic, and a read
//! clears and touches only the bytes the layout gives the rows it reads. And the round
//! trip: what a worker writes at the layout's offsets (as `shmenv.infos` does) is what
//! the trainer reads, in the columns and rows Gymnasium's infos need.
//!
//! CI runs 256 cases per target; for a long run:
//! `PROPTEST_CASES=200000 cargo test --release --test fuzz_infos`.

use proptest::prelude::*;
use shmenv::DType;
use shmenv_engine::protocol::infos::{
    InfoArea, InfoAreaError, InfoLayout, InfoRow, InfoTarget, KeyTables, CELL_BYTES, ENTRY_BYTES, NAME_BYTES,
    SLOTS,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU8, Ordering};

fn atomics(bytes: &[u8]) -> Vec<AtomicU8> {
    bytes.iter().map(|&b| AtomicU8::new(b)).collect()
}

fn plain(bytes: &[AtomicU8]) -> Vec<u8> {
    bytes.iter().map(|b| b.load(Ordering::Relaxed)).collect()
}

/// A worker's writes, at the layout's offsets, as `shmenv.infos` makes them (bytes past
/// the end are dropped, for areas the fuzz made too short).
struct Writer<'a> {
    bytes: &'a mut [u8],
    layout: InfoLayout,
}

impl Writer<'_> {
    fn put(&mut self, at: Option<usize>, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            if let Some(byte) = at.and_then(|at| self.bytes.get_mut(at + i)) {
                *byte = b;
            }
        }
    }

    /// Table entry `slot` of `worker`: the name, zero-padded, then the dtype string.
    fn entry(&mut self, worker: usize, slot: usize, name: &[u8], dtype: &[u8]) {
        let mut raw = [0u8; ENTRY_BYTES];
        let name = &name[..name.len().min(NAME_BYTES)];
        raw[..name.len()].copy_from_slice(name);
        let dtype = &dtype[..dtype.len().min(ENTRY_BYTES - NAME_BYTES)];
        raw[NAME_BYTES..NAME_BYTES + dtype.len()].copy_from_slice(dtype);
        self.put(self.layout.entry(worker, slot), &raw);
    }

    fn count(&mut self, worker: usize, count: u8) {
        self.put(self.layout.count(worker), &[count]);
    }

    /// `value` (its first bytes) into `slot`'s step or reset cell of `pos`, present.
    fn value(&mut self, slot: usize, reset: bool, pos: usize, value: [u8; CELL_BYTES]) {
        self.put(self.layout.value(slot, reset, pos), &value);
        self.put(self.layout.presence(slot, reset, pos), &[1]);
    }

    fn flag(&mut self, pos: usize, pickled: bool) {
        self.put(self.layout.flag(pos), &[1]);
        if pickled {
            self.put(self.layout.pickled(pos), &[1]);
        }
    }
}

/// numpy's `dtype.str` of a column dtype on this machine.
fn dtype_str(dtype: DType) -> String {
    let order = if dtype.size() == 1 {
        '|'
    } else if cfg!(target_endian = "little") {
        '<'
    } else {
        '>'
    };
    let kind = shmenv_engine::protocol::infos::numpy_kind(dtype);
    format!("{order}{kind}{}", dtype.size())
}

/// Key names a worker writes.
fn good_name() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec![
        "lives",
        "score",
        "x",
        "episode_frame_number",
        "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk",
    ])
    .prop_map(|s| s.as_bytes().to_vec())
}

/// dtype strings a worker writes.
fn good_dtype() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(DType::ALL.to_vec()).prop_map(|d| dtype_str(d).into_bytes())
}

/// Key names, most of them fine: short, long, too long, empty, not UTF-8, with a NUL.
fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => good_name(),
        1 => Just(vec![b'k'; NAME_BYTES]),
        1 => Just(vec![b'k'; NAME_BYTES + 1]),
        1 => Just(Vec::new()),
        1 => Just(vec![0xff, 0xfe]),
        1 => Just(b"a\0b".to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..60),
    ]
}

/// dtype strings, most of them a column's.
fn dtype_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => good_dtype(),
        1 => prop::sample::select(vec!["<c16", ">i8", "", "<i16", "<U8", "xx", "|b2"]).prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..20),
    ]
}

/// A fuzz case: the layout's size, the bytes (mostly 0 and 1, some cut short or
/// longer), key tables written over them, a count per worker, and rows.
#[derive(Debug)]
struct Case {
    workers: usize,
    stride: usize,
    bytes: Vec<u8>,
    tables: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
    counts: Vec<Option<u8>>,
    rows: Vec<InfoRow>,
    same_step: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (0usize..4, 0usize..5).prop_flat_map(|(workers, stride)| {
        let layout = InfoLayout::new(workers, stride).unwrap();
        let (size, cells) = (layout.size(), layout.cells());
        let byte = prop_oneof![4 => 0u8..2, 1 => any::<u8>()];
        let len = prop_oneof![4 => Just(size), 1 => size.saturating_sub(16)..size + 16];
        let bytes = len.prop_flat_map(move |len| prop::collection::vec(byte.clone(), len));
        let good = || prop::collection::vec((good_name(), good_dtype()), 0..SLOTS + 2);
        let table = prop_oneof![good(), prop::collection::vec((name(), dtype_bytes()), 0..SLOTS + 2)];
        let tables =
            prop_oneof![prop::collection::vec(good(), workers), prop::collection::vec(table, workers)];
        let count = prop_oneof![4 => Just(None), 1 => any::<u8>().prop_map(Some)];
        let row = (0..cells + 3, any::<bool>(), any::<bool>()).prop_map(|(pos, reset, done)| InfoRow {
            pos,
            reset,
            done,
        });
        (
            bytes,
            tables,
            prop::collection::vec(count, workers),
            prop::collection::vec(row, 0..12),
            any::<bool>(),
        )
            .prop_map(move |(bytes, tables, counts, rows, same_step)| Case {
                workers,
                stride,
                bytes,
                tables,
                counts,
                rows,
                same_step,
            })
    })
}

/// The bytes a read of `rows` may clear: their flags, pickled and presence bytes.
fn cleared_by(layout: &InfoLayout, rows: &[InfoRow]) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for r in rows {
        out.extend(layout.flag(r.pos));
        out.extend(layout.pickled(r.pos));
        for slot in 0..SLOTS {
            out.extend([false, true].into_iter().filter_map(|k| layout.presence(slot, k, r.pos)));
        }
    }
    out
}

/// Checks tables a read returned against the counts: one slot list per worker, as many
/// slots as named (up to `SLOTS`), each a column, each column a key and dtype once.
fn check_tables(tables: &KeyTables, area: &InfoArea<'_>) -> Result<(), TestCaseError> {
    let workers = area.layout().workers();
    prop_assert_eq!(tables.counts.len(), workers);
    prop_assert_eq!(tables.slot_columns.len(), workers);
    for (w, slots) in tables.slot_columns.iter().enumerate() {
        prop_assert_eq!(slots.len(), usize::from(tables.counts[w]).min(SLOTS));
        prop_assert!(slots.iter().all(|&c| c < tables.columns.len()));
    }
    let distinct: BTreeSet<_> = tables.columns.iter().map(|(n, d)| (n.clone(), d.name())).collect();
    prop_assert_eq!(distinct.len(), tables.columns.len());
    for (name, dtype) in &tables.columns {
        prop_assert!(name.len() <= NAME_BYTES && !name.contains('\0') && dtype.size() <= CELL_BYTES);
    }
    prop_assert!(area.tables_current(tables));
    Ok(())
}

proptest! {
    /// Any area (any bytes, key tables, counts, too short or too long) and any rows: the
    /// area is refused when shorter than its layout, the tables are read or refused with
    /// the entry named, and a read of rows (with the tables read, none, or tables that
    /// name slots and columns that do not exist) never panics, hands out only rows and
    /// columns that exist, and changes no byte but the rows' flags, pickled and presence
    /// bytes, which it leaves 0.
    #[test]
    fn reading_any_area_never_panics_and_clears_only_its_rows(case in case()) {
        let layout = InfoLayout::new(case.workers, case.stride).unwrap();
        let mut bytes = case.bytes.clone();
        let mut writer = Writer { bytes: &mut bytes, layout };
        for (w, table) in case.tables.iter().enumerate() {
            for (slot, (name, dtype)) in table.iter().enumerate() {
                writer.entry(w, slot, name, dtype);
            }
            writer.count(w, case.counts[w].unwrap_or(table.len() as u8));
        }
        let shared = atomics(&bytes);
        let area = match InfoArea::new(&shared, layout) {
            Ok(area) => area,
            Err(e) => {
                prop_assert!(bytes.len() < layout.size());
                let expected = InfoAreaError::TooSmall {
                    len: bytes.len(), workers: case.workers, stride: case.stride, needed: layout.size(),
                };
                prop_assert_eq!(&e, &expected);
                prop_assert!(e.to_string().contains("does not fit"));
                return Ok(());
            }
        };
        prop_assert!(bytes.len() >= layout.size());
        let tables = match area.read_tables() {
            Ok(tables) => {
                check_tables(&tables, &area)?;
                tables
            }
            Err(InfoAreaError::BadEntry { worker, slot, .. }) => {
                prop_assert!(worker < case.workers && slot < usize::from(area.count(worker)).min(SLOTS));
                prop_assert!(area.entry(worker, slot).is_err());
                KeyTables::default()
            }
            Err(e) => return Err(TestCaseError::fail(format!("read_tables: {e}"))),
        };
        let wild = KeyTables {
            counts: vec![1; case.workers],
            columns: vec![("x".into(), DType::U8)],
            slot_columns: vec![vec![0, 7, usize::MAX]; case.workers + 2],
        };
        check_read(&case, layout, &bytes, &tables)?;
        check_read(&case, layout, &bytes, &wild)?;
    }
}

/// Reads `case.rows` of an area of `bytes` with `tables`: see the fuzz target above.
fn check_read(
    case: &Case,
    layout: InfoLayout,
    bytes: &[u8],
    tables: &KeyTables,
) -> Result<(), TestCaseError> {
    let shared = atomics(bytes);
    let area = InfoArea::new(&shared, layout).unwrap();
    let mut puts = Vec::new();
    let pickled = area.read_rows(tables, &case.rows, case.same_step, |to, column, row, cell| {
        puts.push((to, column, row, cell));
    });
    let (after, cleared) = (plain(&shared), cleared_by(&layout, &case.rows));
    for (i, (b, a)) in bytes.iter().zip(&after).enumerate() {
        prop_assert!(b == a || (cleared.contains(&i) && *a == 0), "byte {} went from {} to {}", i, b, a);
    }
    for r in &case.rows {
        prop_assert_eq!(area.flag(r.pos), 0);
    }
    prop_assert!(pickled.windows(2).all(|w| w[0] < w[1]) && pickled.iter().all(|&r| r < case.rows.len()));
    for (to, column, row, cell) in puts {
        prop_assert!(row < case.rows.len());
        prop_assert!(tables.slot_columns.iter().flatten().any(|&c| c == column));
        prop_assert!(to == InfoTarget::Infos || (case.same_step && case.rows[row].done));
        let pos = case.rows[row].pos;
        let cells = (0..SLOTS).flat_map(|s| [false, true].map(|k| layout.value(s, k, pos)));
        prop_assert!(cells.flatten().any(|at| bytes[at..at + CELL_BYTES] == cell));
    }
    // Whatever was there is gone: a second read finds nothing.
    let again = area.read_rows(tables, &case.rows, case.same_step, |_, _, _, _| panic!("read twice"));
    prop_assert!(again.is_empty());
    Ok(())
}

/// One env's infos in a round trip: `(key, dtype, value)` for its step and its reset.
type EnvInfos = [Vec<(&'static str, DType, u64)>; 2];

fn env_infos() -> impl Strategy<Value = (EnvInfos, bool, bool, bool)> {
    let keys = prop::sample::select(vec!["lives", "score", "frame"]);
    let dtypes =
        prop::sample::select(vec![DType::I64, DType::F64, DType::Bool, DType::U8, DType::F32, DType::I32]);
    let info = prop::collection::vec((keys, dtypes, any::<u64>()), 0..4);
    ([info.clone(), info], any::<bool>(), any::<bool>(), any::<bool>())
}

/// The first `dtype.size()` bytes of `value`, in a cell.
fn cell_of(dtype: DType, value: u64) -> [u8; CELL_BYTES] {
    let mut cell = [0; CELL_BYTES];
    cell[..dtype.size()].copy_from_slice(&value.to_ne_bytes()[..dtype.size()]);
    cell
}

proptest! {
    /// Workers write envs' step and reset infos as `shmenv.infos` does (each worker names
    /// a `(key, dtype)` in its next free slot, first come first served, up to `SLOTS`;
    /// then value, presence, flag); the trainer reads every env's row and gets exactly
    /// the values the row's kind selects (a reset row or, under SameStep, a row that
    /// ended: reset infos; else step infos; under SameStep an ended row's step infos as
    /// finals), under the key and dtype the worker named, and the pickled rows.
    #[test]
    fn what_workers_write_is_what_the_trainer_reads(
        workers in 1usize..4,
        stride in 1usize..5,
        envs in prop::collection::vec(env_infos(), 16),
        same_step in any::<bool>(),
    ) {
        let layout = InfoLayout::new(workers, stride).unwrap();
        let mut bytes = vec![0u8; layout.size()];
        let mut writer = Writer { bytes: &mut bytes, layout };
        let (mut rows, mut expected, mut expected_pickled) = (Vec::new(), BTreeMap::new(), Vec::new());
        for w in 0..workers {
            let mut named: Vec<(&str, DType)> = Vec::new();
            for local in 0..stride {
                let (infos, reset, done, pickled) = &envs[w * stride + local];
                let (pos, row) = (layout.position(w, local).unwrap(), rows.len());
                rows.push(InfoRow { pos, reset: *reset, done: *done });
                let kind = *reset || (same_step && *done);
                for (k, info) in infos.iter().enumerate() {
                    let mut seen = BTreeSet::new();
                    for &(key, dtype, value) in info.iter().filter(|(key, ..)| seen.insert(*key)) {
                        let slot = named.iter().position(|p| *p == (key, dtype)).or_else(|| {
                            (named.len() < SLOTS).then(|| {
                                named.push((key, dtype));
                                named.len() - 1
                            })
                        });
                        let Some(slot) = slot else { continue };
                        writer.entry(w, slot, key.as_bytes(), dtype_str(dtype).as_bytes());
                        writer.count(w, named.len() as u8);
                        writer.value(slot, k == 1, pos, cell_of(dtype, value));
                        if (k == 1) == kind {
                            expected.insert((InfoTarget::Infos, key, dtype.name(), row), cell_of(dtype, value));
                        }
                        if k == 0 && same_step && *done {
                            expected.insert((InfoTarget::Finals, key, dtype.name(), row), cell_of(dtype, value));
                        }
                    }
                }
                writer.flag(pos, *pickled);
                if *pickled {
                    expected_pickled.push(row);
                }
            }
        }
        let shared = atomics(&bytes);
        let area = InfoArea::new(&shared, layout).unwrap();
        let tables = area.read_tables().unwrap();
        check_tables(&tables, &area)?;
        let mut got = BTreeMap::new();
        let pickled = area.read_rows(&tables, &rows, same_step, |to, column, row, cell| {
            let (key, dtype) = &tables.columns[column];
            let key = ["lives", "score", "frame"].into_iter().find(|k| k == key).unwrap();
            let old = got.insert((to, key, dtype.name(), row), cell);
            assert!(old.is_none(), "{key} of row {row} read twice");
        });
        prop_assert_eq!(got, expected);
        prop_assert_eq!(pickled, expected_pickled);
        let left = plain(&shared);
        prop_assert!(rows.iter().all(|r| left[layout.flag(r.pos).unwrap()] == 0));
        prop_assert!(rows.iter().all(|r| (0..SLOTS).all(|s| [false, true].into_iter().all(|k| left[layout.presence(s, k, r.pos).unwrap()] == 0))));
    }
}

/// A count past the entries a worker named reads zeros as the next entry: refused, naming
/// it (`shmenv.infos`'s tests do the same through a pool).
#[test]
fn a_count_past_the_named_entries_names_the_first_missing_one() {
    let layout = InfoLayout::new(2, 2).unwrap();
    let mut bytes = vec![0u8; layout.size()];
    let mut writer = Writer { bytes: &mut bytes, layout };
    writer.entry(1, 0, b"lives", dtype_str(DType::I64).as_bytes());
    writer.count(1, 3);
    let shared = atomics(&bytes);
    let area = InfoArea::new(&shared, layout).unwrap();
    let e = area.read_tables().unwrap_err();
    assert_eq!(e, InfoAreaError::BadEntry { worker: 1, slot: 1, dtype: Some(String::new()) });
    let text = e.to_string();
    assert!(
        text.starts_with("worker 1's info key 1 is not a UTF-8 name") && text.contains("restart the pool"),
        "{text}"
    );
}
