//! Chat templates from `tokenizer.chat_template`, rendered with minijinja under a fuel limit:
//! a template is untrusted input and must not loop forever or recurse without bound.

use super::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use minijinja::{context, Environment, Error, ErrorKind};

/// Instructions a template may execute before rendering is stopped.
pub const TEMPLATE_FUEL: u64 = 2_000_000;
/// Longest rendered prompt accepted (bytes).
pub const MAX_RENDERED: usize = 16 << 20;

/// Renders `messages` (role, content) with the template; `add_generation_prompt` opens the
/// assistant's turn.
pub fn render_chat(
    template: &str,
    messages: &[(String, String)],
    add_generation_prompt: bool,
    tok: &Tokenizer,
) -> Result<String> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_recursion_limit(64);
    env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_template("chat", template).context("the model's chat template does not parse")?;
    let msgs: Vec<_> = messages.iter().map(|(r, c)| context! { role => r, content => c }).collect();
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
    let out = env
        .get_template("chat")?
        .render(context! {
            messages => msgs,
            add_generation_prompt => add_generation_prompt,
            bos_token => text(tok.bos),
            eos_token => text(tok.eos),
        })
        .context("the model's chat template failed to render")?;
    if out.len() > MAX_RENDERED {
        anyhow::bail!("the chat template rendered {} bytes, over the {MAX_RENDERED}-byte limit", out.len());
    }
    Ok(out)
}
