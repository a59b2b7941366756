//! Tool calls in a model's own words: how a model family writes a call in its output (parsed
//! back into OpenAI's `tool_calls`), how zinc describes the tools to a model whose chat
//! template does not, and the grammar that forces a well-formed call when a request demands one.

use serde_json::{json, Value};

/// A function the client offers the model (`tools[].function`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The function's name.
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// JSON schema of its arguments.
    pub parameters: Value,
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Which function.
    pub name: String,
    /// Its arguments, a JSON object.
    pub arguments: Value,
}

/// How a model family writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSyntax {
    /// `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, one block per call: Qwen's and
    /// Hermes-style templates, and what zinc asks of models whose template knows no tools (the
    /// default model among them).
    Hermes,
    /// One bare JSON object `{"name": …, "parameters": {…}}`, optionally after
    /// `<|python_tag|>`: Llama 3.1 and later.
    Llama3,
}

/// The model's output split into prose and tool calls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedReply {
    /// Text outside the calls (trimmed).
    pub content: String,
    /// The calls, in order.
    pub calls: Vec<ToolCall>,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";

impl ToolSyntax {
    /// The syntax a chat template expects: Llama 3's where the template speaks of its
    /// `ipython` role or `<|python_tag|>`, Hermes' otherwise.
    pub fn for_template(template: Option<&str>) -> ToolSyntax {
        match template {
            Some(t) if t.contains("<|python_tag|>") || t.contains("ipython") => ToolSyntax::Llama3,
            _ => ToolSyntax::Hermes,
        }
    }

    /// Whether `template` renders the `tools` it is given (otherwise zinc describes them in
    /// a system message of its own, [`tools_preamble`]).
    pub fn template_knows_tools(template: Option<&str>) -> bool {
        template.is_some_and(|t| t.contains("tools"))
    }

    /// How a call starts: text that begins with a prefix of this may still become a call, so
    /// a stream holds it back.
    pub fn opener(self) -> &'static str {
        match self {
            ToolSyntax::Hermes => HERMES_OPEN,
            ToolSyntax::Llama3 => "{\"name\"",
        }
    }

    /// Splits `text` into prose and calls. Blocks that are not a well-formed call stay prose.
    pub fn parse(self, text: &str) -> ParsedReply {
        match self {
            ToolSyntax::Hermes => parse_hermes(text),
            ToolSyntax::Llama3 => parse_llama3(text),
        }
    }

    /// An assistant message's earlier calls as this syntax writes them, for templates that
    /// render only text.
    pub fn render_calls(self, calls: &[ToolCall]) -> String {
        let one = |c: &ToolCall| match self {
            ToolSyntax::Hermes => {
                format!("{HERMES_OPEN}\n{}\n{HERMES_CLOSE}", json!({"name": c.name, "arguments": c.arguments}))
            }
            ToolSyntax::Llama3 => json!({"name": c.name, "parameters": c.arguments}).to_string(),
        };
        calls.iter().map(one).collect::<Vec<_>>().join("\n")
    }

    /// A Lark grammar (llguidance's dialect) whose every sentence is one call — or, with
    /// `parallel`, one or more — of the given tools, each call's arguments valid under its
    /// function's schema.
    pub fn forcing_grammar(self, tools: &[ToolSpec], parallel: bool) -> String {
        let key = match self {
            ToolSyntax::Hermes => "arguments",
            ToolSyntax::Llama3 => "parameters",
        };
        let variants: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "object", "properties": {"name": {"const": t.name}, key: t.parameters},
                       "required": ["name", key], "additionalProperties": false})
            })
            .collect();
        let schema = json!({"anyOf": variants,
            "x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}});
        let call = match self {
            ToolSyntax::Hermes => format!("call: \"{HERMES_OPEN}\\n\" body \"\\n{HERMES_CLOSE}\""),
            ToolSyntax::Llama3 => "call: body".to_string(),
        };
        let start = if parallel && self == ToolSyntax::Hermes { "start: call (\"\\n\" call)*" } else { "start: call" };
        format!("{start}\n{call}\nbody: %json {schema}\n")
    }
}

/// A call object: `name` and an object under `arguments` or `parameters`.
fn call_from(v: &Value) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = v.get("arguments").or_else(|| v.get("parameters")).cloned().unwrap_or_else(|| json!({}));
    // Some models write the arguments as a JSON string.
    let arguments = match arguments {
        Value::String(s) => serde_json::from_str(&s).ok()?,
        a => a,
    };
    arguments.is_object().then_some(ToolCall { name, arguments })
}

fn parse_hermes(text: &str) -> ParsedReply {
    let mut reply = ParsedReply::default();
    let mut prose = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(HERMES_OPEN) {
        let body_start = at + HERMES_OPEN.len();
        let (body, next) = match rest[body_start..].find(HERMES_CLOSE) {
            Some(end) => (&rest[body_start..body_start + end], body_start + end + HERMES_CLOSE.len()),
            None => (&rest[body_start..], rest.len()),
        };
        match serde_json::from_str::<Value>(body.trim()).ok().as_ref().and_then(call_from) {
            Some(call) => {
                prose.push_str(&rest[..at]);
                reply.calls.push(call);
            }
            None => prose.push_str(&rest[..next]),
        }
        rest = &rest[next..];
    }
    prose.push_str(rest);
    reply.content = prose.trim().to_string();
    reply
}

fn parse_llama3(text: &str) -> ParsedReply {
    let trimmed = text.trim();
    let body = trimmed.strip_prefix(PYTHON_TAG).unwrap_or(trimmed).trim();
    let calls: Vec<ToolCall> = match serde_json::from_str::<Value>(body) {
        Ok(Value::Array(items)) => items.iter().filter_map(call_from).collect(),
        Ok(v) => call_from(&v).into_iter().collect(),
        Err(_) => Vec::new(),
    };
    if calls.is_empty() {
        return ParsedReply { content: trimmed.to_string(), calls };
    }
    ParsedReply { content: String::new(), calls }
}

/// A system message describing `tools` and the Hermes call syntax, for models whose chat
/// template does not render tools itself.
pub fn tools_preamble(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "You may call functions to help with the user's request. The functions, as JSON schemas:\n<tools>\n",
    );
    for t in tools {
        let f = json!({"type": "function", "function": {"name": t.name, "description": t.description,
                       "parameters": t.parameters}});
        s.push_str(&f.to_string());
        s.push('\n');
    }
    s.push_str(
        "</tools>\nTo call a function, answer with a JSON object holding its name and arguments inside \
         <tool_call></tool_call> tags, like this:\n<tool_call>\n{\"name\": \"function_name\", \"arguments\": \
         {\"argument\": \"value\"}}\n</tool_call>",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hermes_calls_are_split_from_prose_and_broken_ones_stay_text() {
        let text =
            "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n\
                    <tool_call>{\"name\": \"time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}</tool_call>";
        let r = ToolSyntax::Hermes.parse(text);
        assert_eq!(r.content, "Let me look.");
        assert_eq!(r.calls.len(), 2);
        assert_eq!(r.calls[0], ToolCall { name: "weather".into(), arguments: json!({"city": "Paris"}) });
        assert_eq!(r.calls[1].arguments, json!({"tz": "CET"}));
        let broken = ToolSyntax::Hermes.parse("a <tool_call>{\"nam\": 1}</tool_call> b");
        assert!(broken.calls.is_empty());
        assert_eq!(broken.content, "a <tool_call>{\"nam\": 1}</tool_call> b");
        // A call cut off by the length limit is still read when its JSON is whole.
        let open = ToolSyntax::Hermes.parse("<tool_call>{\"name\": \"f\", \"arguments\": {}}");
        assert_eq!(open.calls.len(), 1);
    }

    #[test]
    fn llama3_calls_are_bare_json_objects() {
        let r = ToolSyntax::Llama3.parse("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}");
        assert_eq!(r.calls, vec![ToolCall { name: "f".into(), arguments: json!({"x": 1}) }]);
        assert_eq!(ToolSyntax::Llama3.parse("{\"x\": 1}").content, "{\"x\": 1}");
        assert!(ToolSyntax::Llama3.parse("Hello").calls.is_empty());
    }

    #[test]
    fn calls_render_back_in_the_syntax_they_are_parsed_from() {
        let calls = vec![ToolCall { name: "f".into(), arguments: json!({"a": [1, 2]}) }];
        for syntax in [ToolSyntax::Hermes, ToolSyntax::Llama3] {
            assert_eq!(syntax.parse(&syntax.render_calls(&calls)).calls, calls);
        }
    }

    #[test]
    fn template_detection() {
        assert_eq!(ToolSyntax::for_template(Some("{{ '<|python_tag|>' }}")), ToolSyntax::Llama3);
        assert_eq!(ToolSyntax::for_template(Some("<|im_start|>")), ToolSyntax::Hermes);
        assert!(!ToolSyntax::template_knows_tools(Some("<|im_start|>{{ message['content'] }}")));
    }
}
