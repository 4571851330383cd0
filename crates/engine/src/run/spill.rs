//! The writer's spill file: finished records the database could not take, beyond what the
//! writer keeps in memory, appended to a file beside the database so that neither a long
//! outage nor a `kill -9` loses them. One file per run (`run-{id}.spill.jsonl`), one JSON
//! record a line, each append flushed to disk before it counts as kept. Records are keyed
//! (run, candidate, case, phase, repetition, attempt) and the store skips a key it holds, so a
//! replay that is cut short and replayed again never stores a record twice. The file is
//! removed once every record in it is stored.
//!
//! Records the database refuses (it answers, with an error that is not an outage) go to a
//! second file, `run-{id}.refused.jsonl`, one `{"reason", "record"}` object a line: kept, never
//! replayed by itself (the database would refuse them again), for someone to look at.
//!
//! Blocking file work: callers run these functions on the blocking pool, never on the
//! measurement runtime's threads.
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use crate::domain::run::RequestRecord;

/// Where run `run_id`'s spill file lives in `dir`.
pub fn path(dir: &Path, run_id: i64) -> PathBuf {
    dir.join(format!("run-{run_id}.spill.jsonl"))
}

/// Where run `run_id`'s refused records live in `dir`.
pub fn refused_path(dir: &Path, run_id: i64) -> PathBuf {
    dir.join(format!("run-{run_id}.refused.jsonl"))
}

/// A record the database refused, and what it said.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Refused {
    pub reason: String,
    pub record: RequestRecord,
}

/// Appends `refused` to run `run_id`'s refused-records file in `dir` (created if needed) and
/// waits until they are on disk.
pub fn append_refused(dir: &Path, run_id: i64, refused: &[Refused]) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = refused_path(dir, run_id);
    let mut text = String::new();
    for r in refused {
        text.push_str(&serde_json::to_string(r).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
    file.write_all(text.as_bytes())?;
    file.sync_data()?;
    Ok(path)
}

/// Every record of a refused-records file (none when there is no file).
pub fn read_refused(path: &Path) -> std::io::Result<Vec<Refused>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
        .collect()
}

/// An open spill file, appended to only.
pub struct SpillFile {
    path: PathBuf,
    file: File,
}

impl SpillFile {
    /// Opens (creating the directory and the file if needed) run `run_id`'s spill file.
    pub fn open(dir: &Path, run_id: i64) -> std::io::Result<SpillFile> {
        std::fs::create_dir_all(dir)?;
        let path = path(dir, run_id);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(SpillFile { path, file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `records` and waits until they are on disk. A line cut short by a crash is
    /// left out when the file is read (see [`read`]); its record was never counted as kept.
    pub fn append(&mut self, records: &[RequestRecord]) -> std::io::Result<()> {
        let mut text = String::new();
        for r in records {
            let line = serde_json::to_string(r).map_err(std::io::Error::other)?;
            text.push_str(&line);
            text.push('\n');
        }
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()
    }
}

/// What a spill file holds.
#[derive(Debug, Default)]
pub struct Spilled {
    pub records: Vec<RequestRecord>,
    /// Lines that could not be read back: a last line cut short by a crash (its record was
    /// never counted as kept, and is measured again), or damage, described for the run's log.
    pub unreadable: Vec<String>,
}

/// Reads every record of a spill file; None when there is no file.
pub fn read(path: &Path) -> std::io::Result<Option<Spilled>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = Spilled::default();
    for (i, line) in BufReader::new(file).split(b'\n').enumerate() {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<RequestRecord>(&line) {
            Ok(r) => out.records.push(r),
            Err(e) => out.unreadable.push(format!("{} line {}: {e}", path.display(), i + 1)),
        }
    }
    Ok(Some(out))
}

/// Removes a spill file whose records are all stored (no file: nothing to do).
pub fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::RecordTexts;
    use crate::domain::run::RequestRecord;

    fn record(case: &str) -> RequestRecord {
        RequestRecord {
            texts: RecordTexts {
                output: "a\0b \u{e000} é".into(),
                ..Default::default()
            }
            .into(),
            chunks: vec![(1_000, 3)].into(),
            ..RequestRecord::test_quality(case)
        }
    }

    #[test]
    fn appended_records_read_back_equal_and_a_torn_last_line_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = SpillFile::open(dir.path(), 7).unwrap();
        f.append(&[record("a"), record("b")]).unwrap();
        f.append(&[record("c")]).unwrap();
        // A crash half-way through a line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(f.path())
            .unwrap()
            .write_all(b"{\"run_id\":1,\"cand")
            .unwrap();
        let read = read(&path(dir.path(), 7)).unwrap().unwrap();
        assert_eq!(read.records, vec![record("a"), record("b"), record("c")]);
        assert_eq!(read.unreadable.len(), 1, "{:?}", read.unreadable);
        assert!(read.unreadable[0].contains("line 4"));
        remove(&path(dir.path(), 7)).unwrap();
        assert!(read_missing(dir.path()));
    }

    #[test]
    fn refused_records_read_back_with_their_reason() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |case: &str| Refused {
            reason: format!("no {case}"),
            record: record(case),
        };
        let path = append_refused(dir.path(), 3, &[refused("a")]).unwrap();
        append_refused(dir.path(), 3, &[refused("b")]).unwrap();
        assert_eq!(path, refused_path(dir.path(), 3));
        assert_eq!(read_refused(&path).unwrap(), vec![refused("a"), refused("b")]);
        assert!(read_refused(&refused_path(dir.path(), 4)).unwrap().is_empty());
    }

    fn read_missing(dir: &Path) -> bool {
        read(&path(dir, 7)).unwrap().is_none()
    }
}
