//! Line numbers from a code object's line table and an instruction index,
//! as CPython computes them (`PyCode_Addr2Line`): 3.10's PEP 626 table
//! and 3.11's location table. Tested against `co_lines()` and
//! `co_positions()` of every installed interpreter (capture's python
//! tests).

use super::layout::LineTable;

/// A code object's line table decoded once: its instruction ranges in
/// order, each with its line, so that a frame's line is a binary search.
/// Walking the table from its start for every sampled frame was a seventh
/// of tprof's CPU on the test suite's PyTorch job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineMap {
    kind: LineTable,
    firstlineno: u32,
    /// Each range's end (exclusive; in the table's unit: bytes for PEP
    /// 626, code units for locations) and its line (None: no line). A range
    /// starts where the one before it ends, the first at 0; the ranges
    /// stop where the table ends or stops making sense.
    ranges: Vec<(i64, Option<u32>)>,
}

impl LineMap {
    pub(crate) fn new(kind: LineTable, table: &[u8], firstlineno: u32) -> LineMap {
        let mut ranges = Vec::new();
        let mut add = |end: i64, line: Option<i64>| {
            ranges.push((end, line.and_then(|l| u32::try_from(l).ok())));
        };
        match kind {
            LineTable::Pep626 => pep626(table, i64::from(firstlineno), &mut add),
            LineTable::Locations => locations(table, i64::from(firstlineno), &mut add),
        }
        LineMap {
            kind,
            firstlineno,
            ranges,
        }
    }

    /// The line of the instruction `lasti` (in code units); None where the
    /// table gives the instruction no line, or does not reach it.
    pub(crate) fn line(&self, lasti: i32) -> Option<u32> {
        if lasti < 0 {
            // Not started yet: the function's own line.
            return Some(self.firstlineno);
        }
        let addr = match self.kind {
            LineTable::Pep626 => i64::from(lasti) * 2,
            LineTable::Locations => i64::from(lasti),
        };
        let i = self.ranges.partition_point(|&(end, _)| end <= addr);
        self.ranges.get(i)?.1
    }
}

/// 3.10: (byte delta, signed line delta) pairs; a line delta of -128 means
/// no line. Ranges in bytes.
fn pep626(table: &[u8], firstlineno: i64, add: &mut impl FnMut(i64, Option<i64>)) {
    let mut line = firstlineno;
    let mut end = 0i64;
    for pair in table.chunks_exact(2) {
        end += i64::from(pair[0]);
        let delta = pair[1] as i8;
        if delta == -128 {
            add(end, None);
        } else {
            line += i64::from(delta);
            add(end, Some(line));
        }
    }
}

/// 3.11+: entries of a start byte `1 cccc lll` (code, length - 1 in code
/// units) and code-dependent data. Ranges in code units; the first entry
/// that does not parse ends them (a table we misread gives no lines past
/// it rather than wrong ones).
fn locations(table: &[u8], firstlineno: i64, add: &mut impl FnMut(i64, Option<i64>)) {
    let mut bytes = table.iter().copied();
    let mut line = firstlineno;
    let mut addr = 0i64;
    while let Some(first) = bytes.next() {
        let Some(this) = location(first, &mut bytes, &mut line) else {
            return;
        };
        addr += i64::from(first & 7) + 1;
        add(addr, this);
    }
}

/// One location entry after its start byte `first`: Some(its line, None
/// for no line), or None where the entry does not parse.
#[expect(
    clippy::option_option,
    reason = "an entry with no line and an entry that does not parse differ"
)]
fn location(
    first: u8,
    bytes: &mut impl Iterator<Item = u8>,
    line: &mut i64,
) -> Option<Option<i64>> {
    if first & 0x80 == 0 {
        return None; // not at an entry's start
    }
    let code = (first >> 3) & 15;
    Some(match code {
        15 => None,
        14 => {
            *line += signed_varint(bytes)?;
            varint(bytes)?; // end line delta
            varint(bytes)?; // column + 1
            varint(bytes)?; // end column + 1
            Some(*line)
        }
        13 => {
            *line += signed_varint(bytes)?;
            Some(*line)
        }
        10..=12 => {
            *line += i64::from(code) - 10;
            bytes.next()?; // column
            bytes.next()?; // end column
            Some(*line)
        }
        _ => {
            bytes.next()?; // short form: columns in one byte
            Some(*line)
        }
    })
}

/// Six bits a byte, low first; bit 6 says another byte follows.
fn varint(bytes: &mut impl Iterator<Item = u8>) -> Option<i64> {
    let mut b = bytes.next()?;
    let mut value = i64::from(b & 63);
    let mut shift = 0;
    while b & 64 != 0 {
        b = bytes.next()?;
        shift += 6;
        if shift > 56 {
            return None;
        }
        value |= i64::from(b & 63) << shift;
    }
    Some(value)
}

/// A varint with the sign in its lowest bit.
fn signed_varint(bytes: &mut impl Iterator<Item = u8>) -> Option<i64> {
    let v = varint(bytes)?;
    Some(if v & 1 != 0 { -(v >> 1) } else { v >> 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pep626_pairs() {
        // Bytes 0..6 on line 10 (first line), 6..10 on line 12, 10..14 no
        // line, 14..16 on line 11.
        let table = [6, 0, 4, 2, 4, 0x80, 2, 255];
        let map = LineMap::new(LineTable::Pep626, &table, 10);
        let line = |lasti| map.line(lasti);
        assert_eq!(line(0), Some(10));
        assert_eq!(line(2), Some(10));
        assert_eq!(line(3), Some(12));
        assert_eq!(line(5), None);
        assert_eq!(line(7), Some(11));
        assert_eq!(line(8), None);
        assert_eq!(line(-1), Some(10));
    }

    #[test]
    fn location_entries() {
        // +70 as CPython's signed varint: 70 << 1.
        const PLUS_70: u32 = 0x8c;
        let table = [
            // 2 units, short form (code 0), same line 20.
            0x80 | 1,
            0x12,
            // 1 unit, one-line form code 11: line 21.
            0x80 | (11 << 3),
            4,
            9,
            // 3 units, no column (13): line delta -2 → 19.
            0x80 | (13 << 3) | 2,
            (2 << 1) | 1,
            // 1 unit, no location.
            0x80 | (15 << 3),
            // 2 units, long form: +70 (two varint bytes), then end line and
            // columns.
            0x80 | (14 << 3) | 1,
            0x40 | (PLUS_70 & 0x3f) as u8,
            (PLUS_70 >> 6) as u8,
            0,
            1,
            1,
        ];
        let map = LineMap::new(LineTable::Locations, &table, 20);
        let line = |lasti| map.line(lasti);
        assert_eq!(line(0), Some(20));
        assert_eq!(line(1), Some(20));
        assert_eq!(line(2), Some(21));
        assert_eq!(line(3), Some(19));
        assert_eq!(line(5), Some(19));
        assert_eq!(line(6), None);
        assert_eq!(line(7), Some(89));
        assert_eq!(line(8), Some(89));
        assert_eq!(line(9), None);
        // A truncated or garbled table gives no line rather than a wrong one.
        let garbled = |table: &[u8]| LineMap::new(LineTable::Locations, table, 20).line(0);
        assert_eq!(garbled(&[0x12]), None);
        assert_eq!(garbled(&[0x80 | (14 << 3)]), None);
        // Lines before the garbled entry stay.
        let map = LineMap::new(LineTable::Locations, &[0x80 | 1, 0x12, 0x12], 20);
        assert_eq!((map.line(1), map.line(2)), (Some(20), None));
    }
}
