//! `REPLAY_TUNE`: whether the autotuner runs.

use std::fmt;

/// What the autotuner does when asked for a configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TuneMode {
    /// Never tune: use the first valid candidate of the search space.
    Off,
    /// Use the cached result; tune on a miss (the default).
    #[default]
    Cached,
    /// Tune again even on a hit, replacing the cached result (once per tuner: a problem
    /// asked again by the same tuner reuses what it just tuned).
    Force,
}

impl TuneMode {
    /// Parses a `REPLAY_TUNE` value (`off`/`0`/`false`, `cached`/`on`/`1`, `force`; any case,
    /// surrounding blanks ignored). Unset or empty means [`TuneMode::Cached`].
    pub fn parse(value: Option<&str>) -> Result<TuneMode, String> {
        let Some(v) = value else {
            return Ok(TuneMode::Cached);
        };
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "cached" | "cache" | "on" | "1" | "true" => Ok(TuneMode::Cached),
            "off" | "0" | "false" | "no" => Ok(TuneMode::Off),
            "force" => Ok(TuneMode::Force),
            other => Err(format!("REPLAY_TUNE={other:?}: expected off, cached or force")),
        }
    }

    /// The mode `REPLAY_TUNE` asks for; an invalid value is reported on stderr and means
    /// [`TuneMode::Cached`].
    pub fn from_env() -> TuneMode {
        TuneMode::parse(std::env::var("REPLAY_TUNE").ok().as_deref()).unwrap_or_else(|e| {
            eprintln!("replay: warning: {e}; using `cached`");
            TuneMode::Cached
        })
    }
}

impl fmt::Display for TuneMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TuneMode::Off => "off",
            TuneMode::Cached => "cached",
            TuneMode::Force => "force",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replay_tune() {
        assert_eq!(TuneMode::parse(None), Ok(TuneMode::Cached));
        assert_eq!(TuneMode::parse(Some("")), Ok(TuneMode::Cached));
        assert_eq!(TuneMode::parse(Some("cached")), Ok(TuneMode::Cached));
        assert_eq!(TuneMode::parse(Some(" OFF ")), Ok(TuneMode::Off));
        assert_eq!(TuneMode::parse(Some("0")), Ok(TuneMode::Off));
        assert_eq!(TuneMode::parse(Some("Force")), Ok(TuneMode::Force));
        assert!(TuneMode::parse(Some("sometimes")).unwrap_err().contains("sometimes"));
        for m in [TuneMode::Off, TuneMode::Cached, TuneMode::Force] {
            assert_eq!(TuneMode::parse(Some(&m.to_string())), Ok(m));
        }
    }
}
