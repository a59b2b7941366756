//! Which `Host` and `Origin` a request may carry. A web page the user visits can send
//! requests to a server on loopback: by DNS rebinding (its own name resolving to 127.0.0.1,
//! so the browser lets it read the replies) or by a plain cross-site POST. Requests whose
//! `Host` names neither a loopback name, the bound address nor an allowed name are refused,
//! and so are requests whose `Origin` (sent by browsers) names another host.

use super::{api::ApiError, AppState};
use axum::{
    extract::{Request, State},
    http::{header, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use std::{net::SocketAddr, sync::Arc};

/// The host names requests may use.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// Lower-case names without ports.
    names: Vec<String>,
    /// Whether any `Host` goes (a non-loopback bind without an allow-list: names it may be
    /// reached by are unknown, and its tenants' keys protect it).
    any: bool,
}

impl AllowedHosts {
    /// The loopback names, the bound address and `extra` (`name` or `name:port`).
    pub fn new(bound: SocketAddr, extra: &[String]) -> AllowedHosts {
        let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"].iter().map(|s| s.to_string()).collect();
        names.push(bound.ip().to_string());
        names.extend(extra.iter().map(|h| strip_port(&h.to_ascii_lowercase()).to_string()));
        AllowedHosts { names, any: !bound.ip().is_loopback() && extra.is_empty() }
    }

    /// Whether a `Host` value (`name`, `name:port`, `[v6]:port`) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        self.any || self.names.iter().any(|n| *n == strip_port(&host.to_ascii_lowercase()))
    }

    /// Whether an `Origin` value (`scheme://host[:port]`, or `null`) is allowed.
    pub fn allows_origin(&self, origin: &str) -> bool {
        match origin.split_once("://") {
            Some((_, host)) => self.names.iter().any(|n| *n == strip_port(&host.to_ascii_lowercase())),
            None => false,
        }
    }
}

/// The name part of `name:port` or `[v6]:port`.
fn strip_port(host: &str) -> &str {
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Middleware: refuses a request whose `Host` or `Origin` is not allowed.
pub async fn check(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(refusal) = refusal(&st.hosts, &req) {
        return refusal;
    }
    next.run(req).await
}

/// The answer to a request whose `Host` or `Origin` is not allowed.
fn refusal(hosts: &AllowedHosts, req: &Request) -> Option<Response> {
    let value = |h: header::HeaderName| req.headers().get(h).and_then(|v| v.to_str().ok());
    if let Some(host) = value(header::HOST).filter(|h| !hosts.allows(h)) {
        return Some(forbidden(format!(
            "requests naming host {host:?} are refused; start zinc with --allow-host {host}"
        )));
    }
    if let Some(origin) = value(header::ORIGIN).filter(|o| !hosts.allows_origin(o)) {
        return Some(forbidden(format!(
            "requests from origin {origin:?} are refused; start zinc with --allow-host for it"
        )));
    }
    None
}

fn forbidden(message: String) -> Response {
    ApiError::internal(StatusCode::FORBIDDEN, message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_the_allow_list_pass_others_do_not() {
        let h = AllowedHosts::new("127.0.0.1:8080".parse().unwrap(), &["Box.Lan:8080".to_string()]);
        for ok in ["localhost:8080", "127.0.0.1", "[::1]:9", "LOCALHOST", "box.lan"] {
            assert!(h.allows(ok), "{ok}");
        }
        for bad in ["evil.example", "evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example"] {
            assert!(!h.allows(bad), "{bad}");
        }
        assert!(h.allows_origin("http://localhost:3000"));
        assert!(!h.allows_origin("https://evil.example"));
        assert!(!h.allows_origin("null"));
    }

    #[test]
    fn a_public_bind_without_a_list_takes_any_host_but_checks_origins() {
        let h = AllowedHosts::new("0.0.0.0:8080".parse().unwrap(), &[]);
        assert!(h.allows("10.1.2.3:8080"));
        assert!(!h.allows_origin("https://evil.example"));
    }
}
