//! [`Front`]: a [`Door`] as an rmcp server handler.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, Implementation, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::McpError;
use crate::door::{Caller, Door};
use crate::unread::unread_request;

/// One MCP session's handler. The door is shared (one per process on stdio,
/// one for all sessions over HTTP); the resource subscriptions of an
/// `initialize`-era session are its own.
pub struct Front<D> {
    door: Arc<D>,
    subscribed: Arc<Mutex<HashSet<String>>>,
    /// Stops this session's notification task when the session is dropped.
    stop: CancellationToken,
    _stop_on_drop: DropGuard,
}

impl<D: Door> Front<D> {
    pub fn new(door: Arc<D>) -> Self {
        let stop = CancellationToken::new();
        Self { door, subscribed: Arc::default(), _stop_on_drop: stop.clone().drop_guard(), stop }
    }

    fn resource_uris(&self) -> Vec<String> {
        self.door.resources().iter().filter_map(|r| r["uri"].as_str().map(str::to_owned)).collect()
    }
}

fn caller(context: &RequestContext<RoleServer>) -> Caller {
    Caller { client: context.client_info() }
}

/// An rmcp result built from its JSON form: the wire shape is the stable
/// contract, while the Rust structs are `non_exhaustive`. It says
/// `resultType: "complete"`, which 2026-07-28 clients require and rmcp's
/// own constructors set (rmcp strips it for older peers).
fn from_json<T: serde::de::DeserializeOwned>(mut value: Value) -> Result<T, McpError> {
    value["resultType"] = json!("complete");
    serde_json::from_value(value).map_err(|e| McpError::internal_error(format!("building a reply: {e}"), None))
}

impl<D: Door> ServerHandler for Front<D> {
    fn get_info(&self) -> ServerConfig {
        let name = self.door.server_name();
        let mut tools = ServerCapabilities::builder().enable_tools();
        if self.door.tools_change() {
            tools = tools.enable_tool_list_changed();
        }
        let capabilities = if self.door.resources().is_empty() {
            tools.build()
        } else {
            tools.enable_resources().enable_resources_subscribe().build()
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(name.name, name.version))
            .with_instructions(name.instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.door.list_tools(&caller(&context)).await?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = request.arguments.unwrap_or_default();
        let result = self.door.call_tool(&caller(&context), &request.name, arguments, context.ct.clone()).await;
        Ok(result.into())
    }

    /// A request rmcp did not read as any method it types: an MCP method
    /// with params that do not fit gets -32602 saying why.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        Err(unread_request(&request.method, request.params))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        from_json(json!({"resources": self.door.resources()}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let contents = self.door.read_resource(&caller(&context), &request.uri).await?;
        let result: ReadResourceResult = from_json(json!({"contents": contents}))?;
        Ok(result.into())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !self.resource_uris().contains(&request.uri) {
            return Err(McpError::resource_not_found(format!("no resource {}", request.uri), None));
        }
        self.subscribed.lock().insert(request.uri);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscribed.lock().remove(&request.uri);
        Ok(())
    }

    /// An `initialize`-era session is ready: start telling it about changes.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.door.changes().deliver_to_session(
            context.peer,
            self.subscribed.clone(),
            self.door.tools_change(),
            self.resource_uris(),
            self.stop.clone(),
        );
    }

    /// A 2026-07-28 `subscriptions/listen`: accept the tool list (when it can
    /// change) and our own resources.
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        if !self.door.tools_change() {
            accepted.tools_list_changed = None;
        }
        accepted.prompts_list_changed = None;
        accepted.resources_list_changed = None;
        let ours = self.resource_uris();
        accepted.resource_subscriptions = requested
            .resource_subscriptions
            .as_ref()
            .map(|uris| uris.iter().filter(|u| ours.contains(u)).cloned().collect());
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.door.changes().deliver_to_stream(context, self.resource_uris()).await;
        Ok(())
    }
}
