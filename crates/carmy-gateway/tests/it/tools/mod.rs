//! Tools (docs/semantics.md §4, §10): tools files, HTTP tools against real upstreams and their
//! faults, and the example order tools' failures.

mod effect_unknown;
mod http_tool_faults;
pub(crate) mod http_tools;
mod order_errors;
pub(crate) mod payments;
pub(crate) mod tools_file;
pub(crate) mod upstream;
