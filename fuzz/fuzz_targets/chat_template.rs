//! Chat templates and the messages rendered through them. The first byte picks the case:
//! - a template from the input (a hostile model file's `tokenizer.chat_template`) renders or
//!   is refused with an error, within its fuel, however it loops or recurses;
//! - a real model's template (SmolLM2's ChatML, Gemma 3's) with messages from the input: the
//!   contents are located in the rendered text, and however they spell control tokens, the
//!   prompt holds exactly the control tokens the template itself writes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zinc::model::chat::{render_chat_with, ChatExtras};

const ROLES: [&str; 4] = ["system", "user", "assistant", "user"];

fn messages(parts: &[&[u8]]) -> Vec<(String, String)> {
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| (ROLES[i % ROLES.len()].to_string(), String::from_utf8_lossy(p).into_owned()))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let model = zinc_fuzz::model(selector >> 1);
    let tok = &model.tokenizer;
    let extras = ChatExtras::default();
    if selector & 1 == 1 {
        let parts = zinc_fuzz::parts(rest, 4);
        let template = String::from_utf8_lossy(parts[0]);
        let msgs = messages(&parts[1..]);
        if let Ok(chat) = render_chat_with(&template, &msgs, &extras, true, tok) {
            // As the server: text that cannot fit the context is refused untokenized.
            if chat.text.len() <= zinc_fuzz::prompt_text_limit(model) {
                let _ = chat.tokens(&msgs, tok);
            }
        }
        return;
    }
    let template = model.chat_template.as_deref().expect("the test models have templates");
    let msgs = messages(&zinc_fuzz::parts(rest, 5));
    let Ok(chat) = render_chat_with(template, &msgs, &extras, true, tok) else { return };
    let Some(spans) = &chat.contents else { return };
    for span in spans {
        let located = &chat.text[span.clone()];
        assert!(msgs.iter().any(|(_, c)| c == located), "a located span is no message's content: {located:?}");
    }
    let Ok(prompt) = chat.tokens(&msgs, tok) else { return };
    // The same conversation with harmless contents: the template's own control tokens only.
    let blank: Vec<(String, String)> = msgs.iter().map(|(r, _)| (r.clone(), "x".to_string())).collect();
    let own = render_chat_with(template, &blank, &extras, true, tok).expect("the template rendered these roles");
    let own = own.tokens(&blank, tok).expect("harmless contents tokenize");
    let controls = |ids: &[u32]| ids.iter().filter(|&&id| tok.is_control(id)).count();
    assert_eq!(controls(&prompt), controls(&own), "message contents became control tokens");
});
