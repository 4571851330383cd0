//! The writer's spill file: finished records the database could not take, beyond what the
//! writer keeps in memory, appended to a file beside the database so that neither a long
//! outage nor a `kill -9` loses them. One file per run (`run-{id}.spill.jsonl`), one JSON
//! record a line, each append flushed to disk before it counts as kept. Records are keyed
//! (run, candidate, case, phase, repetition, attempt) and the store skips a key it holds, so a
//! replay that is cut short and replayed again never stores a record twice. The file is
//! removed once every record in it is stored.
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
    use crate::domain::run::RequestRecord;

    fn record(case: &str) -> RequestRecord {
        RequestRecord {
            output: "a\0b \u{e000} é".into(),
            chunks: vec![(1_000, 3)],
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

    fn read_missing(dir: &Path) -> bool {
        read(&path(dir, 7)).unwrap().is_none()
    }
}
