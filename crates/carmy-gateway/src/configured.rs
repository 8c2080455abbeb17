//! Tools from the tools file (`CARMY_TOOLS_FILE`, docs/semantics.md §10): loaded and validated
//! in full before the gateway touches its store, built into tools that share one upstream HTTP
//! client, and shown by `carmy-gateway check-config`.

use crate::config::Config;
use crate::GatewayError;
use carmy::engine::Engine;
use carmy::Tool;
use carmy_tools::mcp::McpUpstream;
use carmy_tools::{HttpTool, ToolsConfig};
use std::sync::Arc;

/// The names of the example tools this build serves (docs/semantics.md §9): none without the
/// cargo feature `example-tools`.
#[cfg(feature = "example-tools")]
const EXAMPLE_TOOL_NAMES: &[&str] = &crate::tools::EXAMPLE_TOOL_NAMES;
/// The names of the example tools this build serves: none, it was built without the cargo
/// feature `example-tools`.
#[cfg(not(feature = "example-tools"))]
const EXAMPLE_TOOL_NAMES: &[&str] = &[];

/// Reads and validates the tools file, if one is configured; `${NAME}` references are read
/// from the process environment.
///
/// # Errors
/// [`GatewayError::ToolsFile`] naming the file, line, tool and field of the first mistake, or
/// `example_tools = true` in a build without the cargo feature `example-tools`.
pub fn load(config: &Config) -> Result<Option<ToolsConfig>, GatewayError> {
    let Some(path) = &config.tools_file else {
        return Ok(None);
    };
    let tools = carmy_tools::load(
        path,
        &carmy_tools::secret::from_environment,
        EXAMPLE_TOOL_NAMES,
    )?;
    if tools.example_tools && !cfg!(feature = "example-tools") {
        return Err(GatewayError::ToolsFile(carmy_tools::ConfigError {
            file: path.clone(),
            line: None,
            entry: None,
            field: Some("example_tools".to_owned()),
            message: "this carmy-gateway was built without the example tools (cargo feature `example-tools`): remove `example_tools = true` or use a build with the feature".to_owned(),
        }));
    }
    Ok(Some(tools))
}

/// The tools `file` declares (its client-held tools too, docs/semantics.md §16), sending
/// through one pooled client. An HTTP body over a tool's
/// `max_response_bytes` (default `max_result_bytes`) is recorded as `RESULT_TOO_LARGE`.
///
/// # Errors
/// [`GatewayError::UpstreamClient`] when the HTTP client cannot be built.
pub fn tools(
    file: &ToolsConfig,
    max_result_bytes: usize,
) -> Result<Vec<Arc<dyn Tool>>, GatewayError> {
    let client = upstream_client()?;
    let held = file.client_tools.iter().map(|spec| {
        Arc::new(
            carmy::held::ClientTool::new(
                spec.name.clone(),
                spec.description.clone(),
                spec.input_schema.clone(),
            )
            .with_annotations(spec.annotations.clone())
            .with_redaction(spec.redaction.clone()),
        ) as Arc<dyn Tool>
    });
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
        .chain(held)
        .collect())
}

/// `carmy-gateway check-config`: validates the tools file, prints the tool table (secrets
/// masked) on standard output, connects to each MCP server and lists its tools, checks the
/// tools that tool probes call, and returns without serving.
///
/// # Errors
/// As [`load`] and [`tools`].
pub async fn check_config(config: &Config) -> Result<(), GatewayError> {
    let Some(file) = load(config)? else {
        if EXAMPLE_TOOL_NAMES.is_empty() {
            println!("no tools file (CARMY_TOOLS_FILE) and no example tools in this build: no tools to serve");
        } else {
            println!("no tools file (CARMY_TOOLS_FILE): serving the example tools");
            println!("example {}", EXAMPLE_TOOL_NAMES.join(", "));
        }
        return Ok(());
    };
    let keys = crate::key_argument_config(config);
    let mut served = tools(&file, config.max_result_bytes)?;
    for tool in &served {
        carmy::key_argument::resolve(tool.as_ref(), &keys)?;
    }
    println!("tools file {}: valid", file.file.display());
    if file.example_tools {
        println!("example {}", EXAMPLE_TOOL_NAMES.join(", "));
    }
    print!("{}", carmy_tools::table::tool_table(&file));
    let client = upstream_client()?;
    for spec in &file.mcp_servers {
        let (upstream, _connection) = McpUpstream::start(spec.clone(), client.clone())
            .await
            .map_err(GatewayError::Mcp)?;
        let imported = upstream.tools().await.map_err(GatewayError::Mcp)?;
        for tool in &imported {
            carmy::key_argument::resolve(tool.as_ref(), &keys)?;
        }
        let names: Vec<&str> = imported.iter().map(|tool| tool.name()).collect();
        println!(
            "mcp   {}: connected, tools: {}",
            spec.name,
            names.join(", ")
        );
        served.extend(imported);
    }
    carmy_tools::tool_probe::check_served(&file, &served).map_err(GatewayError::ProbeTool)
}

fn upstream_client() -> Result<carmy_tools::client::UpstreamClient, GatewayError> {
    carmy_tools::client::upstream_client()
        .map_err(|error| GatewayError::UpstreamClient(error.to_string()))
}

/// The tool group of MCP server `name` in the engine.
fn group(name: &str) -> String {
    format!("mcp:{name}")
}

/// Connects to every MCP server of `file`, registers its tools in `engine` (each server's as
/// one group) and keeps them current: reconnecting with backoff when a server goes away and
/// re-reading its tool list after a reconnect or a `tools/list_changed`.
///
/// # Errors
/// [`GatewayError::Mcp`] when a server cannot be reached or listed at start, or its tools'
/// names clash with other tools.
pub async fn start_mcp_servers(
    file: &ToolsConfig,
    engine: &Arc<Engine>,
) -> Result<(), GatewayError> {
    let client = upstream_client()?;
    for spec in &file.mcp_servers {
        let (upstream, connection) = McpUpstream::start(spec.clone(), client.clone())
            .await
            .map_err(GatewayError::Mcp)?;
        let imported = upstream.tools().await.map_err(GatewayError::Mcp)?;
        tracing::info!(server = %spec.name, tools = imported.len(), "MCP server connected");
        engine
            .replace_tool_group(&group(&spec.name), imported)
            .map_err(|error| GatewayError::Mcp(format!("MCP server {:?}: {error}", spec.name)))?;
        let engine = Arc::clone(engine);
        let name = spec.name.clone();
        upstream.supervise(connection, move |tools| {
            if let Err(error) = engine.replace_tool_group(&group(&name), tools) {
                tracing::warn!(server = %name, %error, "MCP tool list not applied");
            }
        });
    }
    Ok(())
}
