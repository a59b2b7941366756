//! Tool calls in OpenAI's shapes: the request's `tools` and `tool_choice` checked, the
//! conversation (assistant calls, tool results) put into the words of the model's template, and
//! the reply's calls found in its text — at the end, or while it streams.

use super::api::{ApiError, ChatRequest};
use crate::model::{
    chat::ChatExtras,
    tools::{tools_preamble, ToolCall, ToolSpec, ToolSyntax},
};
use serde_json::{json, Value};

/// Which calls a request allows or demands.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// At least one call, of any of the tools: a grammar forces it.
    Required,
    /// A call of this function: a grammar forces it.
    Named(String),
}

/// A request's tools, as the server uses them.
#[derive(Debug, Clone)]
pub struct ToolUse {
    /// The functions offered.
    pub specs: Vec<ToolSpec>,
    /// What the request asks of the model.
    pub choice: ToolChoice,
    /// Several calls in one reply.
    pub parallel: bool,
    /// How the model writes calls.
    pub syntax: ToolSyntax,
}

fn bad(message: impl Into<String>, param: &str) -> ApiError {
    ApiError::bad(message, Some(param))
}

/// A function name as OpenAI allows it: 1–64 of `a-z A-Z 0-9 _ -`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn spec_from(v: &Value) -> Result<ToolSpec, ApiError> {
    if v.get("type").and_then(Value::as_str) != Some("function") {
        return Err(bad("each tool must be {\"type\": \"function\", \"function\": {...}}", "tools"));
    }
    let f = v.get("function").filter(|f| f.is_object()).ok_or_else(|| bad("a tool lacks its `function`", "tools"))?;
    let name = f.get("name").and_then(Value::as_str).unwrap_or("");
    if !valid_name(name) {
        return Err(bad(format!("tool name {name:?} must be 1 to 64 letters, digits, '_' or '-'"), "tools"));
    }
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p) if p.is_object() => p.clone(),
        Some(_) => return Err(bad(format!("the parameters of tool {name} must be a JSON schema object"), "tools")),
    };
    let description = f.get("description").and_then(Value::as_str).map(str::to_string);
    Ok(ToolSpec { name: name.to_string(), description, parameters })
}

impl ToolUse {
    /// The tools `req` offers, or `None` where it offers none or `tool_choice` is `none` (the
    /// model then answers in prose, its tools unmentioned).
    pub fn from_request(req: &ChatRequest, template: Option<&str>) -> Result<Option<ToolUse>, ApiError> {
        let tools = req.tools.as_deref().unwrap_or(&[]);
        if tools.len() > 128 {
            return Err(bad("at most 128 tools", "tools"));
        }
        let specs = tools.iter().map(spec_from).collect::<Result<Vec<_>, _>>()?;
        for (i, s) in specs.iter().enumerate() {
            if specs[..i].iter().any(|o| o.name == s.name) {
                return Err(bad(format!("two tools are named {}", s.name), "tools"));
            }
        }
        let choice = match &req.tool_choice {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => return Ok(None),
                "required" => ToolChoice::Required,
                _ => return Err(bad("tool_choice must be auto, none, required or a named function", "tool_choice")),
            },
            Some(v) => {
                let name = v.get("function").and_then(|f| f.get("name")).and_then(Value::as_str).ok_or_else(|| {
                    bad("a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": …}}", "tool_choice")
                })?;
                if !specs.iter().any(|s| s.name == name) {
                    return Err(bad(
                        format!("tool_choice names {name:?}, which is not among the tools"),
                        "tool_choice",
                    ));
                }
                ToolChoice::Named(name.to_string())
            }
        };
        if specs.is_empty() {
            return match choice {
                ToolChoice::Auto => Ok(None),
                _ => Err(bad("tool_choice asks for a call but no tools are given", "tool_choice")),
            };
        }
        let syntax = ToolSyntax::for_template(template);
        Ok(Some(ToolUse { specs, choice, parallel: req.parallel_tool_calls.unwrap_or(true), syntax }))
    }

    /// The grammar that forces a call, where the choice demands one.
    pub fn forcing_grammar(&self) -> Option<String> {
        let tools: Vec<ToolSpec> = match &self.choice {
            ToolChoice::Auto => return None,
            ToolChoice::Required => self.specs.clone(),
            ToolChoice::Named(n) => self.specs.iter().filter(|s| &s.name == n).cloned().collect(),
        };
        let parallel = self.parallel && self.choice == ToolChoice::Required;
        Some(self.syntax.forcing_grammar(&tools, parallel))
    }

    /// `tools` as templates that render them expect (OpenAI's shape).
    pub fn template_tools(&self) -> Value {
        Value::Array(
            self.specs
                .iter()
                .map(|s| json!({"type": "function", "function": {"name": s.name, "description": s.description, "parameters": s.parameters}}))
                .collect(),
        )
    }

    /// The system message that describes the tools to a template that cannot.
    pub fn preamble(&self) -> String {
        tools_preamble(&self.specs)
    }
}

/// A conversation in the words of the model's template: (role, content) pairs and what the
/// template sees besides.
pub struct Conversation {
    /// Roles and contents.
    pub messages: Vec<(String, String)>,
    /// Tools and earlier calls, for templates that render them.
    pub extras: ChatExtras,
}

/// Puts `req`'s messages into the template's words. A template that knows tools gets the
/// tools and each assistant message's calls as data, and `tool` messages as they are; for one
/// that does not, zinc describes the tools in the system message ([`ToolUse::preamble`]),
/// writes earlier calls into the assistant's text in the model's syntax, and hands tool results
/// back as user turns wrapped in `<tool_response>` tags.
pub fn conversation(
    req: &ChatRequest,
    tools: Option<&ToolUse>,
    template: Option<&str>,
) -> Result<Conversation, ApiError> {
    let knows_tools = ToolSyntax::template_knows_tools(template);
    let syntax = tools.map_or_else(|| ToolSyntax::for_template(template), |t| t.syntax);
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    let mut calls = Vec::with_capacity(req.messages.len() + 1);
    for m in &req.messages {
        let role = match m.role.as_str() {
            "system" | "user" | "assistant" | "tool" => m.role.as_str(),
            "developer" => "system",
            other => return Err(bad(format!("message role `{other}` is not supported"), "messages")),
        };
        let mut text = m.text()?;
        let earlier = match (&m.tool_calls, role) {
            (Some(c), "assistant") if !c.is_empty() => calls_in_history(c)?,
            (Some(c), _) if !c.is_empty() => return Err(bad("only assistant messages carry tool_calls", "messages")),
            _ => Vec::new(),
        };
        if knows_tools {
            let as_data = (!earlier.is_empty()).then(|| {
                Value::Array(
                    earlier
                        .iter()
                        .map(|c| json!({"type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                        .collect(),
                )
            });
            messages.push((role.to_string(), text));
            calls.push(as_data);
            continue;
        }
        let role = match role {
            "tool" => {
                text = format!("<tool_response>\n{text}\n</tool_response>");
                "user"
            }
            "assistant" if !earlier.is_empty() => {
                let written = syntax.render_calls(&earlier);
                text = if text.trim().is_empty() { written } else { format!("{text}\n{written}") };
                "assistant"
            }
            r => r,
        };
        messages.push((role.to_string(), text));
        calls.push(None);
    }
    let mut extras = ChatExtras { tools: None, tool_calls: calls };
    match tools {
        Some(t) if knows_tools => extras.tools = Some(t.template_tools()),
        Some(t) => match messages.first_mut() {
            Some((role, content)) if role == "system" => *content = format!("{content}\n\n{}", t.preamble()),
            _ => {
                messages.insert(0, ("system".to_string(), t.preamble()));
                extras.tool_calls.insert(0, None);
            }
        },
        None => {}
    }
    Ok(Conversation { messages, extras })
}

/// The calls of an assistant message in the history, read from OpenAI's shape (arguments as
/// a JSON string).
pub fn calls_in_history(calls: &[Value]) -> Result<Vec<ToolCall>, ApiError> {
    calls
        .iter()
        .map(|c| {
            let f = c.get("function").ok_or_else(|| bad("a tool call lacks its `function`", "messages"))?;
            let name =
                f.get("name").and_then(Value::as_str).ok_or_else(|| bad("a tool call lacks its name", "messages"))?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str(s)
                    .map_err(|e| bad(format!("the arguments of a call to {name} are not JSON: {e}"), "messages"))?,
                Some(v) => v.clone(),
                None => json!({}),
            };
            Ok(ToolCall { name: name.to_string(), arguments })
        })
        .collect()
}

/// A reply's calls in OpenAI's shape, with ids unique to the reply.
pub fn calls_json(calls: &[ToolCall], reply_id: &str) -> Vec<Value> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"id": format!("call_{reply_id}_{i}"), "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments.to_string()}})
        })
        .collect()
}

/// A streamed reply's text, split as it comes: prose is streamed as soon as it cannot be the
/// start of a call; from the first call on, the text is held and read at the end.
#[derive(Debug)]
pub struct ToolStream {
    syntax: ToolSyntax,
    text: String,
    /// Bytes of `text` already streamed as content.
    sent: usize,
    /// Whether a call has begun (everything from `sent` on is held).
    in_call: bool,
}

impl ToolStream {
    /// A splitter for replies in `syntax`.
    pub fn new(syntax: ToolSyntax) -> ToolStream {
        ToolStream { syntax, text: String::new(), sent: 0, in_call: false }
    }

    /// Adds generated text; returns the prose that can be streamed now.
    pub fn push(&mut self, piece: &str) -> Option<String> {
        self.text.push_str(piece);
        if self.in_call {
            return None;
        }
        let opener = self.syntax.opener();
        let rest = &self.text[self.sent..];
        let upto = match rest.find(opener) {
            Some(at) => {
                self.in_call = true;
                at
            }
            None => rest.len() - held_prefix(rest, opener),
        };
        let out = rest[..upto].to_string();
        self.sent += upto;
        (!out.is_empty()).then_some(out)
    }

    /// At the end of the reply: the prose not streamed yet and the calls.
    pub fn finish(self) -> (Option<String>, Vec<ToolCall>) {
        let parsed = self.syntax.parse(&self.text[self.sent..]);
        if parsed.calls.is_empty() {
            let rest = self.text[self.sent..].to_string();
            return ((!rest.is_empty()).then_some(rest), parsed.calls);
        }
        ((!parsed.content.is_empty()).then_some(parsed.content), parsed.calls)
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `opener`.
fn held_prefix(text: &str, opener: &str) -> usize {
    (1..opener.len())
        .rev()
        .find(|&n| text.is_char_boundary(text.len().saturating_sub(n)) && text.ends_with(&opener[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> ChatRequest {
        serde_json::from_value(body).unwrap()
    }

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
               "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    }

    #[test]
    fn tool_choice_forms_and_their_refusals() {
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let use_of = |choice: Value| {
            ToolUse::from_request(
                &request(json!({"messages": msgs, "tools": [weather()], "tool_choice": choice})),
                None,
            )
        };
        assert_eq!(use_of(json!("auto")).unwrap().unwrap().choice, ToolChoice::Auto);
        assert!(use_of(json!("none")).unwrap().is_none());
        assert_eq!(use_of(json!("required")).unwrap().unwrap().choice, ToolChoice::Required);
        let named = use_of(json!({"type": "function", "function": {"name": "get_weather"}})).unwrap().unwrap();
        assert_eq!(named.choice, ToolChoice::Named("get_weather".into()));
        assert!(named.forcing_grammar().unwrap().contains("get_weather"));
        assert_eq!(
            use_of(json!({"type": "function", "function": {"name": "nope"}})).unwrap_err().param.as_deref(),
            Some("tool_choice")
        );
        assert!(use_of(json!("sometimes")).is_err());
        let bad_tool = json!({"messages": msgs, "tools": [{"type": "function", "function": {"name": "a b"}}]});
        assert_eq!(ToolUse::from_request(&request(bad_tool), None).unwrap_err().param.as_deref(), Some("tools"));
        let twice = json!({"messages": msgs, "tools": [weather(), weather()]});
        assert!(ToolUse::from_request(&request(twice), None).is_err());
    }

    #[test]
    fn templates_that_know_tools_get_them_as_data_and_others_in_words() {
        let model = crate::model::loaded::default_model_for_tests();
        let body = json!({"messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "-3 C"}], "tools": [weather()]});
        let req = request(body);
        // A Qwen-style template: tools and calls rendered by the template itself.
        let qwen = "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}{% endfor %}</tools>{% endif %}\
                    {% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}\
                    {% for c in m.tool_calls or [] %}<tool_call>{{ c.function.arguments | tojson }}</tool_call>{% endfor %}\
                    <|im_end|>{% endfor %}";
        let tools = ToolUse::from_request(&req, Some(qwen)).unwrap();
        let conv = conversation(&req, tools.as_ref(), Some(qwen)).unwrap();
        assert_eq!(conv.messages.len(), 3);
        assert_eq!(conv.messages[2].0, "tool");
        let text = crate::model::chat::render_chat_with(qwen, &conv.messages, &conv.extras, true, &model.tokenizer)
            .unwrap()
            .text;
        assert!(text.starts_with("<tools>get_weather</tools>"), "{text}");
        assert!(text.contains("<tool_call>{\"city\":\"Oslo\"}</tool_call>"), "{text}");
        // The default model's template knows no tools: zinc's words instead.
        let tpl = model.chat_template.as_deref();
        let tools = ToolUse::from_request(&req, tpl).unwrap();
        let conv = conversation(&req, tools.as_ref(), tpl).unwrap();
        let roles: Vec<&str> = conv.messages.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert!(conv.messages[0].1.contains("\"get_weather\"") && conv.messages[0].1.contains("<tool_call>"));
        assert_eq!(ToolSyntax::Hermes.parse(&conv.messages[2].1).calls[0].arguments, json!({"city": "Oslo"}));
        assert_eq!(conv.messages[3].1, "<tool_response>\n-3 C\n</tool_response>");
    }

    #[test]
    fn a_stream_sends_prose_at_once_and_holds_a_call_until_the_end() {
        let mut s = ToolStream::new(ToolSyntax::Hermes);
        assert_eq!(s.push("Checking "), Some("Checking ".into()));
        assert_eq!(s.push("now <tool"), Some("now ".into()), "a possible opener is held back");
        assert_eq!(s.push("_call>{\"name\": \"get_weather\", "), None);
        assert_eq!(s.push("\"arguments\": {\"city\": \"Oslo\"}}</tool_call>"), None);
        let (rest, calls) = s.finish();
        assert_eq!(rest, None);
        assert_eq!(calls, vec![ToolCall { name: "get_weather".into(), arguments: json!({"city": "Oslo"}) }]);
        // Text that only looked like an opener is streamed at the end.
        let mut s = ToolStream::new(ToolSyntax::Hermes);
        assert_eq!(s.push("a <tool"), Some("a ".into()));
        assert_eq!(s.finish(), (Some("<tool".into()), vec![]));
    }
}
