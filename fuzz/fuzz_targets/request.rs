//! Request bodies as `POST /v1/chat/completions` and `POST /v1/completions` read them, through
//! every step before the engine (the handlers' order: JSON, field checks, log-probabilities,
//! tools, the conversation in the template's words, the output grammar compiled for the
//! vocabulary, the rendered prompt's tokens). A body is accepted or refused with a client
//! error; nothing panics, nothing runs without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use zinc::engine::constraint::{Grammar, GrammarCompiler};
use zinc::model::chat::render_chat_with;
use zinc::server::api::{ChatRequest, CompletionRequest};
use zinc::server::tool_calls::{conversation, ToolUse};

fn compiler() -> &'static GrammarCompiler {
    static COMPILER: OnceLock<GrammarCompiler> = OnceLock::new();
    COMPILER.get_or_init(|| GrammarCompiler::new(&zinc_fuzz::smollm2().tokenizer).expect("SmolLM2's grammar tables"))
}

fn chat(req: ChatRequest) {
    let model = zinc_fuzz::smollm2();
    if req.common.check().is_err() || req.common.logprobs_ask(true).is_err() || req.messages.is_empty() {
        return;
    }
    let template = model.chat_template.as_deref();
    let Ok(tools) = ToolUse::from_request(&req, template) else { return };
    let Ok(conv) = conversation(&req, tools.as_ref(), template) else { return };
    let forced = tools.as_ref().and_then(ToolUse::forcing_grammar).map(Grammar::Lark);
    let grammar = match (forced, req.common.output_grammar()) {
        (_, Err(_)) | (Some(_), Ok(Some(_))) => return,
        (Some(g), Ok(None)) | (None, Ok(Some(g))) => Some(g),
        (None, Ok(None)) => None,
    };
    if let Some(g) = grammar {
        if compiler().compile(&g).is_err() {
            return;
        }
    }
    let tpl = template.expect("SmolLM2 has a chat template");
    if let Ok(chat) = render_chat_with(tpl, &conv.messages, &conv.extras, true, &model.tokenizer) {
        let _ = chat.tokens(&conv.messages, &model.tokenizer);
    }
}

fn completion(req: CompletionRequest) {
    if req.common.check().is_err() || req.common.logprobs_ask(false).is_err() {
        return;
    }
    if let Some(text) = req.prompt.as_str() {
        let _ = zinc_fuzz::smollm2().tokenizer.encode(text, true, false);
    }
    if let Ok(Some(g)) = req.common.output_grammar() {
        let _ = compiler().compile(&g);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = serde_json::from_slice::<ChatRequest>(data) {
        chat(req);
    } else if let Ok(req) = serde_json::from_slice::<CompletionRequest>(data) {
        completion(req);
    }
});
