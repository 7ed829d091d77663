//! Line numbers from a code object's line table and an instruction index,
//! as CPython computes them (`PyCode_Addr2Line`): 3.10's PEP 626 table
//! and 3.11's location table. Tested against `co_lines()` and
//! `co_positions()` of every installed interpreter (capture's python
//! tests).

use super::layout::LineTable;

/// The line of the instruction `lasti` (in code units) of a code object
/// whose table is `table` and first line `firstlineno`; None where the
/// table gives the instruction no line, or does not reach it.
pub(crate) fn line_of(kind: LineTable, table: &[u8], firstlineno: u32, lasti: i32) -> Option<u32> {
    if lasti < 0 {
        // Not started yet: the function's own line.
        return Some(firstlineno);
    }
    let line = match kind {
        LineTable::Pep626 => pep626(table, i64::from(firstlineno), i64::from(lasti) * 2),
        LineTable::Locations => locations(table, i64::from(firstlineno), i64::from(lasti)),
    }?;
    u32::try_from(line).ok()
}

/// 3.10: (byte delta, signed line delta) pairs; a line delta of -128 means
/// no line. `addr` in bytes.
fn pep626(table: &[u8], firstlineno: i64, addr: i64) -> Option<i64> {
    let mut line = firstlineno;
    let mut end = 0i64;
    for pair in table.chunks_exact(2) {
        let start = end;
        end += i64::from(pair[0]);
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if start <= addr && addr < end {
            return this;
        }
    }
    None
}

/// 3.11+: entries of a start byte `1 cccc lll` (code, length - 1 in code
/// units) and code-dependent data. `unit` in code units.
fn locations(table: &[u8], firstlineno: i64, unit: i64) -> Option<i64> {
    let mut bytes = table.iter().copied();
    let mut line = firstlineno;
    let mut addr = 0i64;
    while let Some(first) = bytes.next() {
        if first & 0x80 == 0 {
            return None; // not at an entry's start: a table we misread
        }
        let code = (first >> 3) & 15;
        let length = i64::from(first & 7) + 1;
        let this = match code {
            15 => None,
            14 => {
                line += signed_varint(&mut bytes)?;
                varint(&mut bytes)?; // end line delta
                varint(&mut bytes)?; // column + 1
                varint(&mut bytes)?; // end column + 1
                Some(line)
            }
            13 => {
                line += signed_varint(&mut bytes)?;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code) - 10;
                bytes.next()?; // column
                bytes.next()?; // end column
                Some(line)
            }
            _ => {
                bytes.next()?; // short form: columns in one byte
                Some(line)
            }
        };
        if addr <= unit && unit < addr + length {
            return this;
        }
        addr += length;
    }
    None
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
        let line = |lasti| line_of(LineTable::Pep626, &table, 10, lasti);
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
        let line = |lasti| line_of(LineTable::Locations, &table, 20, lasti);
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
        assert_eq!(line_of(LineTable::Locations, &[0x12], 20, 0), None);
        assert_eq!(
            line_of(LineTable::Locations, &[0x80 | (14 << 3)], 20, 0),
            None
        );
    }
}
