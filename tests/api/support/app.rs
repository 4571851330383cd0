// owned by its area; see tests/api/main.rs
