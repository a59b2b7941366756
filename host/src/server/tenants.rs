//! Tenants: who may call the server, with what weight, priority, KV quota and queue limits.
//!
//! ```toml
//! max_queued_total = 256            # waiting requests across all tenants
//! admin_key_sha256 = "2bb80d5…"     # the operators' key: GET /metrics needs it
//!
//! [[tenants]]
//! name = "editor"
//! key_sha256 = "9f86d08…"           # SHA-256 of the API key (hex); the key itself is never stored
//! weight = 2.0                      # fair-share weight
//! priority = "interactive"          # default class; a request may ask for a lower one, never higher
//! kv_page_quota = 2048              # KV pages (16 tokens each) its running requests may reserve
//! max_running = 16
//! max_queued = 64
//!
//! [[shared_prefixes]]               # prompt prefixes whose KV pages every tenant may share
//! text = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
//! ```
//!
//! Without a tenants file, local use works as one tenant named `default` with no key.

use crate::engine::request::Band;
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::path::Path;

fn one() -> f64 {
    1.0
}
fn interactive() -> String {
    "interactive".into()
}
fn big() -> u32 {
    u32::MAX
}
fn queued() -> u32 {
    64
}
fn running() -> u32 {
    64
}
fn total() -> u32 {
    1024
}

/// One tenant as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Name for metrics and usage.
    pub name: String,
    /// SHA-256 of the API key, lowercase hex.
    pub key_sha256: String,
    /// Fair-share weight.
    #[serde(default = "one")]
    pub weight: f64,
    /// Default priority class.
    #[serde(default = "interactive")]
    pub priority: String,
    /// KV page quota.
    #[serde(default = "big")]
    pub kv_page_quota: u32,
    /// Running requests at once.
    #[serde(default = "running")]
    pub max_running: u32,
    /// Waiting requests at once.
    #[serde(default = "queued")]
    pub max_queued: u32,
}

/// A shared prefix.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefix {
    /// The prompt text (tokenized as the chat template renders it).
    pub text: String,
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantsFile {
    /// Global waiting limit.
    #[serde(default = "total")]
    pub max_queued_total: u32,
    /// Tenants.
    #[serde(default)]
    pub tenants: Vec<TenantSpec>,
    /// Shared prefixes.
    #[serde(default)]
    pub shared_prefixes: Vec<SharedPrefix>,
    /// SHA-256 of the operators' key (hex), which `GET /metrics` needs; without it the
    /// metrics, which name every tenant and its usage, are not served.
    pub admin_key_sha256: Option<String>,
}

/// A tenant, resolved.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Index (engine id).
    pub id: u32,
    /// The spec.
    pub spec: TenantSpec,
    /// Parsed default priority.
    pub band: Band,
    key_hash: Option<[u8; 32]>,
}

/// All tenants.
#[derive(Debug, Clone)]
pub struct Tenants {
    /// In file order; index = id.
    pub list: Vec<Tenant>,
    /// Global waiting limit.
    pub max_queued_total: u32,
    /// Shared prefix texts.
    pub shared_prefixes: Vec<String>,
    /// True when no file was given (one open tenant).
    pub open: bool,
    /// Hash of the operators' key.
    admin_key_hash: Option<[u8; 32]>,
}

/// SHA-256 of a key, hex.
pub fn hash_key(key: &str) -> String {
    Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Tenants {
    /// The single open tenant used without a tenants file.
    pub fn open_default() -> Tenants {
        let spec = TenantSpec {
            name: "default".into(),
            key_sha256: String::new(),
            weight: 1.0,
            priority: "interactive".into(),
            kv_page_quota: u32::MAX,
            max_running: 256,
            max_queued: 1024,
        };
        Tenants {
            list: vec![Tenant { id: 0, spec, band: Band::Interactive, key_hash: None }],
            max_queued_total: 1024,
            shared_prefixes: Vec::new(),
            open: true,
            admin_key_hash: None,
        }
    }

    /// Reads a tenants file.
    pub fn load(path: &Path) -> Result<Tenants> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read tenants file {}", path.display()))?;
        let f: TenantsFile =
            toml::from_str(&text).with_context(|| format!("tenants file {} is not valid", path.display()))?;
        if f.tenants.is_empty() {
            bail!("tenants file {} lists no tenants", path.display());
        }
        let mut list = Vec::new();
        for (i, t) in f.tenants.into_iter().enumerate() {
            let band = Band::parse(&t.priority).with_context(|| {
                format!("tenant {}: priority must be interactive or batch, not {:?}", t.name, t.priority)
            })?;
            let key = parse_hex(&t.key_sha256.to_ascii_lowercase()).with_context(|| {
                format!("tenant {}: key_sha256 must be 64 hex digits (printf %s KEY | sha256sum)", t.name)
            })?;
            if !(t.weight > 0.0 && t.weight.is_finite()) {
                bail!("tenant {}: weight must be positive", t.name);
            }
            if list.iter().any(|x: &Tenant| x.spec.name == t.name) {
                bail!("tenant {} is listed twice", t.name);
            }
            list.push(Tenant { id: i as u32, spec: t, band, key_hash: Some(key) });
        }
        let admin_key_hash = match &f.admin_key_sha256 {
            Some(h) => Some(
                parse_hex(&h.to_ascii_lowercase())
                    .context("admin_key_sha256 must be 64 hex digits (printf %s KEY | sha256sum)")?,
            ),
            None => None,
        };
        Ok(Tenants {
            list,
            max_queued_total: f.max_queued_total,
            shared_prefixes: f.shared_prefixes.into_iter().map(|p| p.text).collect(),
            open: false,
            admin_key_hash,
        })
    }

    /// Whether a bearer key is the operators' (always, without a tenants file; never, with
    /// one that names no admin key).
    pub fn is_admin(&self, key: Option<&str>) -> bool {
        if self.open {
            return true;
        }
        match (self.admin_key_hash, key) {
            (Some(admin), Some(key)) => same_hash(&admin, &Sha256::digest(key.as_bytes()).into()),
            _ => false,
        }
    }

    /// The tenant a bearer key belongs to. Keys are compared by hash in constant time.
    pub fn authenticate(&self, key: Option<&str>) -> Option<&Tenant> {
        if self.open {
            return self.list.first();
        }
        let h: [u8; 32] = Sha256::digest(key?.as_bytes()).into();
        self.list.iter().find(|t| t.key_hash.is_some_and(|k| same_hash(&k, &h)))
    }
}

/// Whether two key hashes are equal, in time that does not depend on where they differ.
fn same_hash(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_matched_by_hash_and_bad_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("zinc-tenants-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.toml");
        std::fs::write(
            &p,
            format!("[[tenants]]\nname = \"a\"\nkey_sha256 = \"{}\"\npriority = \"batch\"\n", hash_key("secret")),
        )
        .unwrap();
        let t = Tenants::load(&p).unwrap();
        assert_eq!(t.authenticate(Some("secret")).unwrap().spec.name, "a");
        assert_eq!(t.authenticate(Some("Secret")).map(|t| t.id), None);
        assert!(t.authenticate(None).is_none());
        assert_eq!(t.list[0].band, Band::Batch);
        std::fs::write(&p, "[[tenants]]\nname = \"a\"\nkey_sha256 = \"xyz\"\n").unwrap();
        assert!(Tenants::load(&p).unwrap_err().to_string().contains("a"));
        std::fs::write(&p, "[[tenants]]\nname = \"a\"\nkey = \"plain\"\n").unwrap();
        assert!(Tenants::load(&p).is_err(), "a plaintext key field is refused");
        std::fs::remove_dir_all(&dir).ok();
    }
}
