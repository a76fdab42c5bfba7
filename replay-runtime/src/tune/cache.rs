//! The persistent tuning cache: every timing of every tuning run, as JSON in
//! `$XDG_CACHE_HOME/replay/tune-v1.json` (else `~/.cache/replay/tune-v1.json`).
//!
//! Writes are atomic (a temporary file in the same folder, flushed, then renamed over the
//! old one), so a crash leaves either the old or the new file. A file that cannot be parsed
//! is reported on stderr and rebuilt from scratch at the next save. Saving merges with what
//! is on disk, so two processes tuning different kernels keep both results.

use super::key::TuneKey;
use crate::error::{Result, RuntimeError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// File format version (part of the file name).
pub const CACHE_VERSION: u32 = 1;
/// The cache file's name.
pub const CACHE_FILE_NAME: &str = "tune-v1.json";

/// Named values of one candidate (constexprs and `num_warps`, or a scheme's settings).
pub type Values = BTreeMap<String, i64>;

/// What happened to one candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Timed: the median and minimum of `samples` timings, in milliseconds (per unit for
    /// schemes that declare one).
    Timed {
        /// Median time.
        median_ms: f64,
        /// Fastest time.
        min_ms: f64,
        /// Number of timed repetitions.
        samples: usize,
    },
    /// Removed before running by a constraint.
    Pruned {
        /// The constraint's name.
        reason: String,
    },
    /// Failed to trace, compile, load or run.
    Failed {
        /// The error.
        reason: String,
    },
    /// Its output differed from the reference candidate's.
    Mismatch {
        /// Largest relative error seen.
        max_rel_err: f64,
        /// Index of the first differing element.
        first_bad: usize,
    },
}

/// One candidate's configuration and outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateRecord {
    /// The candidate's values.
    pub values: Values,
    /// What happened.
    pub outcome: Outcome,
}

impl CandidateRecord {
    /// Its median time, when it was timed to a finite one.
    pub fn timed_median(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Timed { median_ms, .. } if median_ms.is_finite() => Some(median_ms),
            _ => None,
        }
    }
}

/// The result of one tuning run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneRecord {
    /// What it is valid for.
    pub key: TuneKey,
    /// The fastest candidate (`None` when none ran correctly).
    pub best: Option<Values>,
    /// Every candidate, in search order.
    pub candidates: Vec<CandidateRecord>,
    /// When it was tuned (seconds since the Unix epoch).
    pub tuned_at: u64,
}

impl TuneRecord {
    /// The best candidate's median time.
    pub fn best_ms(&self) -> Option<f64> {
        let best = self.best.as_ref()?;
        self.candidates
            .iter()
            .find(|c| &c.values == best)
            .and_then(|c| match c.outcome {
                Outcome::Timed { median_ms, .. } => Some(median_ms),
                _ => None,
            })
    }

    /// The values of the `k` fastest timed candidates (finite medians only), fastest median
    /// first; equal medians keep their search order.
    pub fn fastest(&self, k: usize) -> Vec<&Values> {
        let mut timed: Vec<(f64, &Values)> = self
            .candidates
            .iter()
            .filter_map(|c| Some((c.timed_median()?, &c.values)))
            .collect();
        timed.sort_by(|a, b| a.0.total_cmp(&b.0));
        timed.into_iter().take(k).map(|(_, v)| v).collect()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    entries: BTreeMap<String, TuneRecord>,
}

/// The tuning cache, loaded in memory.
#[derive(Debug)]
pub struct TuneCache {
    path: Option<PathBuf>,
    entries: BTreeMap<String, TuneRecord>,
    warning: Option<String>,
}

/// `$XDG_CACHE_HOME/replay/tune-v1.json`, else `$HOME/.cache/replay/tune-v1.json`; `None`
/// when neither variable gives an absolute folder.
pub fn default_cache_path() -> Option<PathBuf> {
    cache_path_from(
        std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

/// [`default_cache_path`] from explicit values of `XDG_CACHE_HOME` and `HOME`.
pub fn cache_path_from(xdg_cache_home: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
    let base = xdg_cache_home
        .filter(|p| p.is_absolute())
        .or_else(|| home.filter(|p| p.is_absolute()).map(|h| h.join(".cache")))?;
    Some(base.join("replay").join(CACHE_FILE_NAME))
}

enum Loaded {
    Missing,
    Ok(BTreeMap<String, TuneRecord>),
    Bad(String),
}

fn read_file(path: &Path) -> Loaded {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Loaded::Missing,
        Err(e) => Loaded::Bad(format!("cannot read {}: {e}", path.display())),
        Ok(bytes) => match serde_json::from_slice::<CacheFile>(&bytes) {
            Ok(f) if f.version == CACHE_VERSION => Loaded::Ok(f.entries),
            Ok(f) => Loaded::Bad(format!(
                "{}: version {} (expected {CACHE_VERSION})",
                path.display(),
                f.version
            )),
            Err(e) => Loaded::Bad(format!("{}: {e}", path.display())),
        },
    }
}

impl TuneCache {
    /// Opens the cache at `path`. A missing file is an empty cache; an unreadable or corrupt
    /// one is reported on stderr (see [`Self::warning`]) and replaced at the next save.
    pub fn open(path: impl Into<PathBuf>) -> TuneCache {
        let path = path.into();
        let (entries, warning) = match read_file(&path) {
            Loaded::Missing => (BTreeMap::new(), None),
            Loaded::Ok(e) => (e, None),
            Loaded::Bad(msg) => {
                let msg = format!("tuning cache is unusable and will be rebuilt: {msg}");
                eprintln!("replay: warning: {msg}");
                (BTreeMap::new(), Some(msg))
            }
        };
        TuneCache {
            path: Some(path),
            entries,
            warning,
        }
    }

    /// The cache at [`default_cache_path`], or an in-memory one when there is no such folder.
    pub fn open_default() -> TuneCache {
        default_cache_path()
            .map(TuneCache::open)
            .unwrap_or_else(TuneCache::in_memory)
    }

    /// A cache that is never written to disk.
    pub fn in_memory() -> TuneCache {
        TuneCache {
            path: None,
            entries: BTreeMap::new(),
            warning: None,
        }
    }

    /// The file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The warning given when the file was found corrupt.
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// The record for `key`.
    pub fn get(&self, key: &TuneKey) -> Option<&TuneRecord> {
        self.entries.get(&key.to_string())
    }

    /// Adds or replaces the record for its key (in memory; see [`Self::save`]).
    pub fn insert(&mut self, record: TuneRecord) {
        self.entries.insert(record.key.to_string(), record);
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no record.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the cache atomically, merged with records other processes saved meanwhile
    /// (records of this cache win). A no-op for an in-memory cache.
    pub fn save(&mut self) -> Result<()> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        if let Loaded::Ok(disk) = read_file(&path) {
            for (k, v) in disk {
                self.entries.entry(k).or_insert(v);
            }
        }
        let tmp = self.write_temp(&path)?;
        std::fs::rename(&tmp, &path).map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            RuntimeError::Io {
                path: path.clone(),
                source,
            }
        })?;
        self.warning = None;
        Ok(())
    }

    /// Writes the whole cache to a fresh temporary file beside `path` and returns its name.
    fn write_temp(&self, path: &Path) -> Result<PathBuf> {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| RuntimeError::Io { path: p, source }
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let file = CacheFile {
            version: CACHE_VERSION,
            entries: self.entries.clone(),
        };
        let text = serde_json::to_vec_pretty(&file).map_err(|e| RuntimeError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let tmp = dir.join(format!(".{name}.{}.{nanos}.tmp", std::process::id()));
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&text).and_then(|_| f.sync_all()).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            RuntimeError::Io {
                path: tmp.clone(),
                source: e,
            }
        })?;
        Ok(tmp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    fn record(kernel: &str, n: i64, best_block: i64) -> TuneRecord {
        let key = TuneKey::new(kernel, "src", Device::interpreter().info(), &[("n", n)]);
        let values: Values = [("BLOCK".to_string(), best_block), ("num_warps".to_string(), 4)].into();
        TuneRecord {
            key,
            best: Some(values.clone()),
            candidates: vec![
                CandidateRecord {
                    values,
                    outcome: Outcome::Timed {
                        median_ms: 0.5,
                        min_ms: 0.4,
                        samples: 10,
                    },
                },
                CandidateRecord {
                    values: [("BLOCK".to_string(), 8192)].into(),
                    outcome: Outcome::Failed {
                        reason: "too much shared memory".into(),
                    },
                },
            ],
            tuned_at: 1,
        }
    }

    #[test]
    fn fastest_keeps_the_k_best_timed_candidates_in_order() {
        let timed = |block: i64, median_ms: f64| CandidateRecord {
            values: [("BLOCK".to_string(), block)].into(),
            outcome: Outcome::Timed {
                median_ms,
                min_ms: median_ms,
                samples: 3,
            },
        };
        let mut r = record("add", 1000, 1024);
        r.candidates.extend([
            timed(64, 0.3),
            timed(128, f64::NAN),
            timed(256, 0.9),
            CandidateRecord {
                values: [("BLOCK".to_string(), 32)].into(),
                outcome: Outcome::Mismatch {
                    max_rel_err: 1.0,
                    first_bad: 0,
                },
            },
            timed(512, 0.3),
        ]);
        let blocks = |k: usize| -> Vec<i64> { r.fastest(k).iter().map(|v| v["BLOCK"]).collect() };
        // Equal medians in search order; failed, mismatched and NaN candidates never listed.
        assert_eq!(blocks(3), [64, 512, 1024]);
        assert_eq!(blocks(10), [64, 512, 1024, 256]);
        assert_eq!(blocks(1), [64]);
        assert!(blocks(0).is_empty());
    }

    #[test]
    fn write_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join(CACHE_FILE_NAME);
        let mut c = TuneCache::open(&path);
        assert!(c.is_empty() && c.warning().is_none());
        let r = record("add", 1000, 1024);
        c.insert(r.clone());
        c.save().unwrap();
        let back = TuneCache::open(&path);
        assert_eq!(back.len(), 1);
        assert_eq!(back.get(&r.key), Some(&r));
        assert_eq!(back.get(&r.key).unwrap().best_ms(), Some(0.5));
        // A different bucket misses.
        assert!(back.get(&record("add", 5000, 1).key).is_none());
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn corrupt_file_warns_and_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CACHE_FILE_NAME);
        std::fs::write(&path, b"{ this is not json").unwrap();
        let mut c = TuneCache::open(&path);
        assert!(c.is_empty());
        assert!(c.warning().unwrap().contains("rebuilt"));
        c.insert(record("add", 1000, 256));
        c.save().unwrap();
        let back = TuneCache::open(&path);
        assert!(back.warning().is_none());
        assert_eq!(back.len(), 1);
        // A file of another version is not trusted either.
        std::fs::write(&path, br#"{"version": 99, "entries": {}}"#).unwrap();
        assert!(TuneCache::open(&path).warning().unwrap().contains("version 99"));
    }

    #[test]
    fn crash_before_rename_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CACHE_FILE_NAME);
        let mut c = TuneCache::open(&path);
        let old = record("add", 1000, 256);
        c.insert(old.clone());
        c.save().unwrap();
        let before = std::fs::read(&path).unwrap();
        // Second save "crashes" after writing the temporary file, before the rename.
        c.insert(record("mul", 1000, 512));
        let tmp = c.write_temp(&path).unwrap();
        assert!(tmp.exists());
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let reopened = TuneCache::open(&path);
        assert!(reopened.warning().is_none());
        assert_eq!(reopened.len(), 1);
        assert_eq!(reopened.get(&old.key), Some(&old));
        // Leftover temporaries do not disturb later saves.
        c.save().unwrap();
        assert_eq!(TuneCache::open(&path).len(), 2);
    }

    #[test]
    fn saves_merge_with_other_processes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CACHE_FILE_NAME);
        let mut a = TuneCache::open(&path);
        let mut b = TuneCache::open(&path);
        a.insert(record("add", 1000, 256));
        a.save().unwrap();
        b.insert(record("mul", 1000, 512));
        b.save().unwrap();
        assert_eq!(TuneCache::open(&path).len(), 2);
    }

    #[test]
    fn default_path_rules() {
        let p = cache_path_from(Some("/x/cache".into()), Some("/home/u".into())).unwrap();
        assert_eq!(p, PathBuf::from("/x/cache/replay/tune-v1.json"));
        let p = cache_path_from(None, Some("/home/u".into())).unwrap();
        assert_eq!(p, PathBuf::from("/home/u/.cache/replay/tune-v1.json"));
        // A relative XDG_CACHE_HOME is ignored, as the spec says.
        let p = cache_path_from(Some("rel".into()), Some("/home/u".into())).unwrap();
        assert_eq!(p, PathBuf::from("/home/u/.cache/replay/tune-v1.json"));
        assert!(cache_path_from(None, None).is_none());
        let mut m = TuneCache::in_memory();
        m.insert(record("add", 1, 1));
        m.save().unwrap();
        assert!(m.path().is_none());
    }
}
