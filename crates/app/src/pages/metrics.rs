//! The published metric definitions (DESIGN.md, "Measurement"): the "How we measure" page lists
//! them and the run pages take their labels from them, so the two cannot drift apart.
use crate::domain::calibers::definitions;

/// One published metric definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    pub name: &'static str,
    pub definition: &'static str,
    /// The label shown in tables; `{c}` stands for the load condition.
    pub label: &'static str,
    pub unit: &'static str,
}

pub const TTFT: MetricDef = MetricDef {
    name: "TTFT",
    definition: definitions::TTFT,
    label: "TTFT",
    unit: "ms",
};
pub const TTFA: MetricDef = MetricDef {
    name: "time to first answer",
    definition: definitions::TTFA,
    label: "TTFA",
    unit: "ms",
};
pub const E2E: MetricDef = MetricDef {
    name: "E2E latency",
    definition: definitions::E2E,
    label: "E2E",
    unit: "ms",
};
pub const ICL: MetricDef = MetricDef {
    name: "ICL",
    definition: definitions::ICL,
    label: "ICL",
    unit: "ms",
};
pub const ITL: MetricDef = MetricDef {
    name: "ITL",
    definition: definitions::ITL,
    label: "ITL",
    unit: "ms",
};
pub const TPOT: MetricDef = MetricDef {
    name: "TPOT",
    definition: definitions::TPOT,
    label: "TPOT",
    unit: "ms",
};
pub const DECODE_PER_STREAM: MetricDef = MetricDef {
    name: "decode tok/s (per stream)",
    definition: definitions::DECODE_PER_STREAM,
    label: "decode tok/s/stream",
    unit: "tok/s",
};
pub const E2E_PER_STREAM: MetricDef = MetricDef {
    name: "end-to-end tok/s (per stream)",
    definition: definitions::E2E_PER_STREAM,
    label: "e2e tok/s/stream",
    unit: "tok/s",
};
pub const AGGREGATE: MetricDef = MetricDef {
    name: "aggregate tok/s at load L, steady window",
    definition: definitions::AGGREGATE_STEADY,
    label: "aggregate tok/s @c={c} (steady window)",
    unit: "tok/s",
};
pub const AGGREGATE_WHOLE_RUN: MetricDef = MetricDef {
    name: "aggregate tok/s at load L, whole run",
    definition: definitions::AGGREGATE_WHOLE_RUN,
    label: "aggregate tok/s @c={c} (whole run)",
    unit: "tok/s",
};
pub const REQUEST_THROUGHPUT: MetricDef = MetricDef {
    name: "request throughput, goodput",
    definition: definitions::REQUEST_THROUGHPUT,
    label: "req/s, goodput",
    unit: "req/s",
};

/// The table on the page, in DESIGN.md's order.
pub const METRICS: [MetricDef; 11] = [
    TTFT,
    TTFA,
    E2E,
    ICL,
    ITL,
    TPOT,
    DECODE_PER_STREAM,
    E2E_PER_STREAM,
    AGGREGATE,
    AGGREGATE_WHOLE_RUN,
    REQUEST_THROUGHPUT,
];

impl MetricDef {
    /// The label with its load condition filled in, e.g. `aggregate tok/s @c=4`.
    pub fn label_at(&self, concurrency: Option<u32>) -> String {
        let c = concurrency.map(|c| c.to_string()).unwrap_or_else(|| "?".into());
        self.label.replace("{c}", &c)
    }
    /// The label as printed on this page (`@c=8` as the example load).
    pub fn example_label(&self) -> String {
        self.label.replace("{c}", "8")
    }
}
