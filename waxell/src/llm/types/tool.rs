//! Tools: those offered to the model, the choice among them, and the calls it makes.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// A function tool offered to the model.
///
/// ```
/// use waxell::llm::Tool;
/// use serde_json::json;
///
/// let tool = Tool::function(
///     "run_python",
///     "Run a Python script in the sandbox and return its stdout.",
///     json!({"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}),
/// );
/// assert_eq!(tool.function.name, "run_python");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function's name, description and argument schema.
    pub function: FunctionDefinition,
}

impl Tool {
    /// A function tool with a JSON Schema for its arguments.
    pub fn function(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            kind: "function".to_owned(),
            function: FunctionDefinition {
                name: name.into(),
                description: Some(description.into()),
                parameters: Some(parameters),
                strict: None,
            },
        }
    }
}

/// Name, description and argument schema of a function tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDefinition {
    /// The name the model calls the function by.
    pub name: String,
    /// What the function does, for the model to decide when to call it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// OpenAI's strict mode: the arguments must match `parameters` exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides whether to call a tool (the server's default when tools are offered).
    Auto,
    /// The model must not call a tool.
    None,
    /// The model must call at least one tool.
    Required,
    /// Force a call to this function.
    Function(String),
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => serializer.serialize_str("auto"),
            Self::None => serializer.serialize_str("none"),
            Self::Required => serializer.serialize_str("required"),
            Self::Function(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}}).serialize(serializer)
            }
        }
    }
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id to quote in the [`Message::tool`](crate::llm::Message::tool) result of this call.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function called and its arguments.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".to_owned()
}

impl ToolCall {
    /// A function call with raw JSON `arguments`.
    pub fn function(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }

    /// The arguments parsed as JSON.
    pub fn parse_arguments<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.function.arguments)
    }
}

/// Function name and its arguments as the model wrote them (a JSON string, not always valid JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function to call.
    pub name: String,
    /// Its arguments as a JSON string, exactly as the model wrote them (may be invalid JSON).
    #[serde(default)]
    pub arguments: String,
}
