//! What an extension says about itself in its `initialize` result, read
//! leniently: Hermes extensions in the wild omit optional parts, and a
//! missing list is an empty one. Only a result that is not an object at all
//! fails the extension.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hl7::tree::Format;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authors: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
    #[serde(default)]
    pub capabilities: Capabilities,
    #[serde(default)]
    pub toolbar_buttons: Vec<ToolbarButton>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    #[serde(default)]
    pub commands: Vec<String>,
    #[serde(default)]
    pub schema_provider: bool,
    #[serde(default)]
    pub events: Vec<EventSubscription>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct EventSubscription {
    pub name: String,
    #[serde(default)]
    pub options: EventOptions,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventOptions {
    #[serde(default)]
    pub include_content: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolbarButton {
    pub id: String,
    pub label: String,
    #[serde(default)]
    pub icon: String,
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

impl InitializeResult {
    /// Every command it handles: declared ones, then toolbar buttons' own.
    pub fn commands(&self) -> impl Iterator<Item = &str> {
        self.capabilities
            .commands
            .iter()
            .map(String::as_str)
            .chain(self.toolbar_buttons.iter().map(|b| b.command.as_str()))
    }

    pub fn declares(&self, command: &str) -> bool {
        self.commands().any(|c| c == command)
    }

    pub fn subscription(&self, event: &str) -> Option<&EventSubscription> {
        self.capabilities.events.iter().find(|e| e.name == event)
    }
}
