-- A grade's structured detail as JSON text: per-field outcomes (json-fields), the expected and
-- predicted label (label). NULL for graders that have none, and for grades stored before.
ALTER TABLE grades ADD COLUMN detail TEXT;
