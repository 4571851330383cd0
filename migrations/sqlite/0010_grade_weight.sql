-- Per-grader weight (in the case score, the weighted mean of grade scores) and whether the
-- grade is required (a case passes when every required grade passes). Grades stored before
-- carry the defaults: weight 1, required.
ALTER TABLE grades ADD COLUMN weight REAL NOT NULL DEFAULT 1;
ALTER TABLE grades ADD COLUMN required INTEGER NOT NULL DEFAULT 1 CHECK (required IN (0, 1));
