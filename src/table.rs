//! Plain-text tables: a header, rows, columns padded to their widest cell.

use std::fmt;

/// How a column's cells are aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Left-aligned (text).
    Left,
    /// Right-aligned (numbers).
    Right,
}

/// A table of strings printed with aligned columns.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers; columns are left-aligned until [`Table::align`].
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        let header: Vec<String> = header.into_iter().map(Into::into).collect();
        Table {
            align: vec![Align::Left; header.len()],
            header,
            rows: Vec::new(),
        }
    }

    /// Sets the alignment of column `col`.
    pub fn align(mut self, col: usize, align: Align) -> Table {
        if let Some(a) = self.align.get_mut(col) {
            *a = align;
        }
        self
    }

    /// Right-aligns the columns `cols`.
    pub fn right(mut self, cols: impl IntoIterator<Item = usize>) -> Table {
        for c in cols {
            self = self.align(c, Align::Right);
        }
        self
    }

    /// Appends a row (missing cells are empty, extra cells are dropped).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut r: Vec<String> = cells.into_iter().map(Into::into).collect();
        r.resize(self.header.len(), String::new());
        self.rows.push(r);
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True without rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i] - c.chars().count();
                if i > 0 {
                    s.push_str("  ");
                }
                match self.align[i] {
                    Align::Left if i + 1 == n => s.push_str(c),
                    Align::Left => {
                        s.push_str(c);
                        s.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        s.extend(std::iter::repeat_n(' ', pad));
                        s.push_str(c);
                    }
                }
            }
            writeln!(f, "{}", s.trim_end())
        };
        line(f, &self.header)?;
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(f, &rule)?;
        for r in &self.rows {
            line(f, r)?;
        }
        Ok(())
    }
}

/// A number with `digits` significant digits, in plain or scientific notation as fits.
pub fn sig(x: f64, digits: usize) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    if x == 0.0 {
        return "0".into();
    }
    let mag = x.abs().log10().floor() as i32;
    if !(-3..6).contains(&mag) {
        return format!("{:.*e}", digits.saturating_sub(1), x);
    }
    let decimals = (digits as i32 - 1 - mag).max(0) as usize;
    format!("{x:.decimals$}")
}

/// A relative error as `1.2e-7` (or `0`).
pub fn err(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.is_finite() {
        format!("{x:.1e}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let mut t = Table::new(["kernel", "ms", "note"]).right([1]);
        t.row(["a", "1.5", "x"]);
        t.row(["longer", "10.25"]);
        assert_eq!(
            t.to_string(),
            "kernel     ms  note\n------  -----  ----\na         1.5  x\nlonger  10.25\n"
        );
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn numbers() {
        assert_eq!(sig(1234.567, 4), "1235");
        assert_eq!(sig(0.012345, 3), "0.0123");
        assert_eq!(sig(2.0e9, 3), "2.00e9");
        assert_eq!(err(0.0), "0");
        assert_eq!(err(1.25e-7), "1.2e-7");
        assert_eq!(err(f64::NAN), "NaN");
    }
}
