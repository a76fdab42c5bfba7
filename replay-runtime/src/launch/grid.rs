//! Launch grids: how many programs run, in up to three dimensions.

use std::fmt;

/// The number of programs along x, y and z (`program_id(0..3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    /// Programs along x.
    pub x: u32,
    /// Programs along y.
    pub y: u32,
    /// Programs along z.
    pub z: u32,
}

impl Grid {
    /// A grid of `x × y × z` programs.
    pub fn new(x: u32, y: u32, z: u32) -> Grid {
        Grid { x, y, z }
    }
    /// `ceil(n / block)` programs along x: the usual grid for a 1-D kernel.
    pub fn cdiv(n: u64, block: u64) -> Grid {
        Grid::new(n.div_ceil(block.max(1)).min(u32::MAX as u64) as u32, 1, 1)
    }
    /// Total number of programs.
    pub fn programs(&self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
    /// True when no program would run.
    pub fn is_empty(&self) -> bool {
        self.programs() == 0
    }
}

impl From<u32> for Grid {
    fn from(x: u32) -> Grid {
        Grid::new(x, 1, 1)
    }
}
impl From<(u32, u32)> for Grid {
    fn from((x, y): (u32, u32)) -> Grid {
        Grid::new(x, y, 1)
    }
}
impl From<(u32, u32, u32)> for Grid {
    fn from((x, y, z): (u32, u32, u32)) -> Grid {
        Grid::new(x, y, z)
    }
}

impl fmt::Display for Grid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.x, self.y, self.z)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(Grid::from(4), Grid::new(4, 1, 1));
        assert_eq!(Grid::from((4, 2)).programs(), 8);
        assert_eq!(Grid::cdiv(1000, 256), Grid::new(4, 1, 1));
        assert!(Grid::from((0, 3, 1)).is_empty());
        assert_eq!(Grid::from((1, 2, 3)).to_string(), "(1, 2, 3)");
    }
}
