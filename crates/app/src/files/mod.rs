//! Candidates, threshold profiles and run settings as TOML files a repository can hold: the
//! file formats (typed structs that also generate the JSON Schemas in `docs/schemas/`), their
//! reading with errors that name file, line and field, and their import into and export from
//! the store. A file is converted into the same draft the browser's form submits and checked
//! by the same validation, so a file and the form accept exactly the same things.
//!
//! - `candidates`: `bakeoff_candidates = 1` with `[[candidate]]` tables (keys only as
//!   `api_key_env` references; a file never carries a key)
//! - `profiles`: `bakeoff_profile = 1`, one threshold profile with its `[[rule]]`s
//! - `settings`: `bakeoff_settings = 1`, how a run is executed (a preset and overrides)
//! - `schedules`: `bakeoff_schedules = 1` with `[[schedule]]` tables (docs/schedules.md)
use std::fmt;
use std::ops::Range;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::domain::validation::FieldErrors;

pub mod candidates;
pub mod profiles;
pub mod schedules;
pub mod settings;

/// Largest file read (candidates, profiles and settings files are small).
pub const MAX_FILE_BYTES: usize = 1024 * 1024;

/// One problem in a file: where (line and dotted field path when known) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    pub line: Option<usize>,
    /// Dotted path as written in the file, e.g. `candidate[2].pricing.input_per_mtok`.
    pub field: Option<String>,
    pub message: String,
}

/// Why a file was refused: every problem found, each with its place. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FileError {
    pub file: String,
    pub problems: Vec<FileProblem>,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}", self.file)?;
            if let Some(line) = p.line {
                write!(f, ":{line}")?;
            }
            if let Some(field) = &p.field {
                write!(f, ": field `{field}`")?;
            }
            write!(f, ": {}", p.message)?;
        }
        Ok(())
    }
}

impl FileError {
    pub fn one(file: &str, line: Option<usize>, field: Option<String>, message: impl Into<String>) -> FileError {
        FileError {
            file: file.to_string(),
            problems: vec![FileProblem {
                line,
                field,
                message: message.into(),
            }],
        }
    }
}

/// One step of a path into a TOML document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// `["candidate", 2, "pricing"]` as `candidate[2].pricing`.
pub fn dotted(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// A TOML text with the byte spans of its keys and values, to say on which line a field is.
pub struct Located<'a> {
    text: &'a str,
    doc: Option<toml::Spanned<toml::de::DeTable<'a>>>,
}

impl<'a> Located<'a> {
    pub fn new(text: &'a str) -> Located<'a> {
        Located {
            text,
            doc: toml::de::DeTable::parse(text).ok(),
        }
    }

    /// The 1-based line of byte `offset`.
    pub fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].matches('\n').count() + 1
    }

    /// The span of the value at `path` (for a key that is absent, of the nearest table holding it).
    pub fn span(&self, path: &[Step]) -> Option<Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut best = None;
        let mut table: Option<&toml::de::DeTable<'_>> = Some(doc.get_ref());
        let mut value: Option<&toml::Spanned<toml::de::DeValue<'_>>> = None;
        for step in path {
            let next = match (step, table, value) {
                (Step::Key(k), Some(t), _) => t.iter().find(|(key, _)| key.get_ref() == k).map(|(key, v)| {
                    // A key's own line is where a reader looks, also for a table's header.
                    best = Some(key.span());
                    v
                }),
                (Step::Index(i), _, Some(v)) => v.get_ref().as_array().and_then(|a| a.get(*i)),
                _ => None,
            };
            let Some(v) = next else { break };
            if matches!(step, Step::Index(_)) {
                best = Some(v.span());
            }
            value = Some(v);
            table = v.get_ref().as_table();
        }
        best
    }

    /// The line of the field at `path` (of its table when the field itself is absent).
    pub fn line(&self, path: &[Step]) -> Option<usize> {
        self.span(path).map(|s| self.line_of(s.start))
    }

    /// The value at `path`, when present.
    fn value(&self, path: &[Step]) -> Option<&toml::Spanned<toml::de::DeValue<'a>>> {
        let doc = self.doc.as_ref()?;
        let mut table: Option<&toml::de::DeTable<'a>> = Some(doc.get_ref());
        let mut value: Option<&toml::Spanned<toml::de::DeValue<'a>>> = None;
        for step in path {
            let next = match (step, table, value) {
                (Step::Key(k), Some(t), _) => t.iter().find(|(key, _)| key.get_ref() == k).map(|(_, v)| v),
                (Step::Index(i), _, Some(v)) => v.get_ref().as_array().and_then(|a| a.get(*i)),
                _ => None,
            };
            let v = next?;
            value = Some(v);
            table = v.get_ref().as_table();
        }
        value
    }

    /// The length of the array at `path` (0 when there is none).
    pub fn len(&self, path: &[Step]) -> usize {
        self.value(path)
            .and_then(|v| v.get_ref().as_array())
            .map(|a| a.len())
            .unwrap_or(0)
    }

    /// The keys present at `path` (a table), for checks serde cannot word well.
    pub fn keys(&self, path: &[Step]) -> Vec<String> {
        let table = match path {
            [] => self.doc.as_ref().map(|d| d.get_ref()),
            _ => self.value(path).and_then(|v| v.get_ref().as_table()),
        };
        table
            .map(|t| t.iter().map(|(k, _)| k.get_ref().to_string()).collect())
            .unwrap_or_default()
    }

    /// Form-field errors of the entry at `base`, each mapped to its place in the file by `field_path`.
    pub fn problems(
        &self,
        base: &[Step],
        errors: &FieldErrors,
        field_path: impl Fn(&str) -> Vec<Step>,
    ) -> Vec<FileProblem> {
        errors
            .0
            .iter()
            .map(|e| {
                let mut path = base.to_vec();
                path.extend(field_path(&e.field));
                FileProblem {
                    line: self.line(&path),
                    field: Some(dotted(&path)),
                    message: e.message.clone(),
                }
            })
            .collect()
    }
}

/// Parses `text` as the TOML of `T`; a syntax or shape error names the line and, where serde
/// says, the field.
pub fn parse_toml<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, FileError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(FileError::one(
            file,
            None,
            None,
            format!("file is {} bytes; at most {MAX_FILE_BYTES}", text.len()),
        ));
    }
    let text = text.trim_start_matches('\u{feff}');
    toml::from_str::<T>(text).map_err(|e| {
        let located = Located::new(text);
        let line = e.span().map(|s| located.line_of(s.start));
        let message = e.message().trim().to_string();
        let field = message
            .split_once("unknown field `")
            .or_else(|| message.split_once("missing field `"))
            .and_then(|(_, rest)| rest.split_once('`'))
            .map(|(f, _)| f.to_string());
        FileError::one(file, line, field, message)
    })
}

/// The JSON Schema of `T`, pretty-printed with a final newline (as committed in docs/schemas/).
/// A file's format version (`key`, found on its line) must be the one this bakeoff reads.
pub fn check_version(file: &str, located: &Located, key: &str, found: u32, reads: u32) -> Result<(), FileError> {
    if found == reads {
        return Ok(());
    }
    Err(FileError::one(
        file,
        located.line(&[Step::Key(key.into())]),
        Some(key.into()),
        format!("unsupported format version {found}; this bakeoff reads {reads}"),
    ))
}

pub fn schema_of<T: JsonSchema>() -> String {
    let schema = schemars::schema_for!(T);
    let mut text = serde_json::to_string_pretty(&schema).expect("a schema serialises");
    text.push('\n');
    text
}

/// The file formats and their schema file names in docs/schemas/.
pub fn schemas() -> [(&'static str, String); 4] {
    [
        ("candidates.schema.json", schema_of::<candidates::CandidatesFile>()),
        ("profile.schema.json", schema_of::<profiles::ProfileFile>()),
        ("settings.schema.json", schema_of::<settings::SettingsFile>()),
        ("schedules.schema.json", schema_of::<schedules::SchedulesFile>()),
    ]
}

/// Writes a value as TOML, or says why it cannot be (a JSON `null` in `extra_body`).
pub fn to_toml<T: serde::Serialize>(value: &T) -> Result<String, String> {
    toml::to_string_pretty(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(path: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs")
            .join(path)
    }

    /// docs/schemas/ is generated from these types: `BAKEOFF_WRITE_SCHEMAS=1 cargo test --lib
    /// app::files` rewrites it; otherwise a stale file fails here.
    #[test]
    fn the_committed_schemas_are_the_ones_the_code_generates() {
        for (name, schema) in schemas() {
            let path = docs(&format!("schemas/{name}"));
            if std::env::var_os("BAKEOFF_WRITE_SCHEMAS").is_some() {
                std::fs::write(&path, &schema).unwrap();
            }
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == schema,
                "{} is stale: run BAKEOFF_WRITE_SCHEMAS=1 cargo test --lib app::files",
                path.display()
            );
        }
    }

    /// Every example file in docs/ is valid by its schema and by the parser, and a file the
    /// schema refuses is refused by the parser too.
    #[test]
    fn the_documented_examples_pass_their_schema_and_the_parser() {
        let check = |schema: &str, toml_text: &str| -> bool {
            let schema: serde_json::Value = serde_json::from_str(schema).unwrap();
            let value: serde_json::Value = toml::from_str(toml_text).unwrap();
            jsonschema::draft202012::new(&schema).unwrap().is_valid(&value)
        };
        let [
            (_, candidates_schema),
            (_, profile_schema),
            (_, settings_schema),
            (_, schedules_schema),
        ] = schemas();
        let mut seen = 0;
        for entry in std::fs::read_dir(docs("recipes"))
            .unwrap()
            .chain(std::fs::read_dir(docs("schemas/examples")).unwrap())
        {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.display().to_string();
            if text.contains("bakeoff_candidates") {
                assert!(check(&candidates_schema, &text), "{name} fails its schema");
                candidates::parse(&name, &text).unwrap_or_else(|e| panic!("{e}"));
            } else if text.contains("bakeoff_profile") {
                assert!(check(&profile_schema, &text), "{name} fails its schema");
                profiles::parse(&name, &text, "docs", "example").unwrap_or_else(|e| panic!("{e}"));
            } else if text.contains("bakeoff_settings") {
                assert!(check(&settings_schema, &text), "{name} fails its schema");
                settings::parse(&name, &text).unwrap_or_else(|e| panic!("{e}"));
            } else if text.contains("bakeoff_schedules") {
                // Names are resolved against a store on import (tests/api/schedules.rs); here
                // the file's shape and version.
                assert!(check(&schedules_schema, &text), "{name} fails its schema");
                let file: schedules::SchedulesFile = parse_toml(&name, &text).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(file.bakeoff_schedules, schedules::VERSION, "{name}");
            } else {
                panic!("{name} is not a candidates, profile, settings or schedules file");
            }
            seen += 1;
        }
        assert!(seen >= 4, "examples found: {seen}");
        let bad = "bakeoff_candidates = 1\n[[candidate]]\nname = \"x\"\nprovider = \"grpc\"\nbase_url = \"http://h/v1\"\nmodel = \"m\"\n";
        assert!(!check(&candidates_schema, bad));
        assert!(candidates::parse("bad.toml", bad).is_err());
        // A schedule's settings are the settings file's fields: a misspelt one is refused by
        // the schema, and a schedule needs no `bakeoff_settings` in them.
        let schedule = |settings: &str| {
            format!(
                "bakeoff_schedules = 1\n[[schedule]]\nname = \"n\"\nevalset = \"e\"\ncandidates = [\"c\"]\ncadence = \"@daily\"\n[schedule.settings]\n{settings}\n"
            )
        };
        assert!(check(&schedules_schema, &schedule("concurrency = 4")));
        assert!(!check(&schedules_schema, &schedule("concurency = 4")));
        assert!(!check(&schedules_schema, &schedule("concurrency = 0")));
    }

    #[test]
    fn located_finds_the_line_of_nested_fields_and_array_entries() {
        let text = "a = 1\n\n[[candidate]]\nname = \"x\"\n\n[[candidate]]\nname = \"y\"\n[candidate.pricing]\ninput_per_mtok = -1\n";
        let l = Located::new(text);
        let k = |s: &str| Step::Key(s.to_string());
        assert_eq!(l.line(&[k("a")]), Some(1));
        assert_eq!(l.line(&[k("candidate"), Step::Index(1), k("name")]), Some(7));
        assert_eq!(
            l.line(&[k("candidate"), Step::Index(1), k("pricing"), k("input_per_mtok")]),
            Some(9)
        );
        // An absent field: the line of its entry.
        assert_eq!(l.line(&[k("candidate"), Step::Index(0), k("model")]), Some(3));
        assert_eq!(
            dotted(&[k("candidate"), Step::Index(1), k("pricing")]),
            "candidate[1].pricing"
        );
        assert_eq!(l.keys(&[k("candidate"), Step::Index(0)]), ["name"]);
    }

    #[test]
    fn each_file_kind_refuses_another_format_version_naming_its_line_and_key() {
        let settings = "# settings\nbakeoff_settings = 9\n";
        let candidates = "\nbakeoff_candidates = 9\n";
        let profile = "bakeoff_profile = 9\nname = \"p\"\n";
        let refusals = [
            (
                super::settings::parse("s.toml", settings).unwrap_err(),
                2,
                "bakeoff_settings",
            ),
            (
                super::candidates::parse("c.toml", candidates).unwrap_err(),
                2,
                "bakeoff_candidates",
            ),
            (
                super::profiles::parse("p.toml", profile, "ada", "").err().unwrap(),
                1,
                "bakeoff_profile",
            ),
        ];
        for (err, line, key) in refusals {
            let problem = &err.problems[0];
            assert_eq!(
                (problem.line, problem.field.as_deref()),
                (Some(line), Some(key)),
                "{err}"
            );
            assert!(problem.message.starts_with("unsupported format version 9;"), "{err}");
        }
    }
}
