//! Tools from the tools file (`CARMY_TOOLS_FILE`, docs/semantics.md §10): loaded and validated
//! in full before the gateway touches its store, built into tools that share one upstream HTTP
//! client, and shown by `carmy-gateway check-config`.

use crate::config::Config;
use crate::tools::EXAMPLE_TOOL_NAMES;
use crate::GatewayError;
use carmy::Tool;
use carmy_tools::{HttpTool, ToolsConfig};
use std::sync::Arc;

/// Reads and validates the tools file, if one is configured; `${NAME}` references are read
/// from the process environment.
///
/// # Errors
/// [`GatewayError::ToolsFile`] naming the file, line, tool and field of the first mistake.
pub fn load(config: &Config) -> Result<Option<ToolsConfig>, GatewayError> {
    let Some(path) = &config.tools_file else {
        return Ok(None);
    };
    let tools = carmy_tools::load(
        path,
        &carmy_tools::secret::from_environment,
        &EXAMPLE_TOOL_NAMES,
    )?;
    Ok(Some(tools))
}

/// The tools `file` declares, sending through one pooled client. An HTTP body over a tool's
/// `max_response_bytes` (default `max_result_bytes`) is recorded as `RESULT_TOO_LARGE`.
///
/// # Errors
/// [`GatewayError::UpstreamClient`] when the HTTP client cannot be built.
pub fn tools(
    file: &ToolsConfig,
    max_result_bytes: usize,
) -> Result<Vec<Arc<dyn Tool>>, GatewayError> {
    let client = carmy_tools::client::upstream_client()
        .map_err(|error| GatewayError::UpstreamClient(error.to_string()))?;
    Ok(file
        .http_tools
        .iter()
        .map(|spec| {
            Arc::new(HttpTool::new(
                spec.clone(),
                client.clone(),
                max_result_bytes,
            )) as Arc<dyn Tool>
        })
        .collect())
}

/// `carmy-gateway check-config`: validates the tools file, prints the tool table (secrets
/// masked) on standard output, and returns without serving.
///
/// # Errors
/// As [`load`] and [`tools`].
pub fn check_config(config: &Config) -> Result<(), GatewayError> {
    let Some(file) = load(config)? else {
        println!("no tools file (CARMY_TOOLS_FILE): serving the example tools");
        println!("example {}", EXAMPLE_TOOL_NAMES.join(", "));
        return Ok(());
    };
    tools(&file, config.max_result_bytes)?;
    println!("tools file {}: valid", file.file.display());
    if file.example_tools {
        println!("example {}", EXAMPLE_TOOL_NAMES.join(", "));
    }
    print!("{}", carmy_tools::table::tool_table(&file));
    Ok(())
}
