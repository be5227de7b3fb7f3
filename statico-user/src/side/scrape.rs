//! `--metrics ADDR:PORT`: the metrics port's answers. `/metrics` is the Prometheus page
//! ([`crate::observe::metrics::render`]) with the routes' histograms after it, and
//! `/ground-truth.json` the routes' ground truth ([`crate::observe::truth`]), when there are routes.
//! Both are read from the workers' records when a scrape arrives: the workers do nothing for it.

use std::net::SocketAddr;

use anyhow::Result;

use crate::observe::truth::InForce;
use crate::side::{Door, Reply, Service, SideHead, SideRequest};

/// The largest body a request to the metrics port may carry (it is never read for anything).
const MAX_BODY: u64 = 64 * 1024;

/// The metrics port's service: the page and, with routes, the ground truth in force.
pub struct Scrape<'a> {
    pub page: &'a dyn Fn() -> String,
    pub truth: Option<InForce<'a>>,
}

/// `--metrics`: its listener, bound now; the start-up line says where.
pub fn listen(addr: Option<SocketAddr>) -> Result<Option<Door>> {
    let Some(addr) = addr else { return Ok(None) };
    let door = Door::bind("--metrics", addr, MAX_BODY)?;
    eprintln!("statico: metrics on http://{}/metrics", door.local_addr()?);
    Ok(Some(door))
}

/// What a path is, on this port.
enum Page {
    Metrics,
    Truth,
}

impl Scrape<'_> {
    fn page(&self, path: &str) -> Option<Page> {
        match path {
            "/metrics" => Some(Page::Metrics),
            "/ground-truth.json" if self.truth.is_some() => Some(Page::Truth),
            _ => None,
        }
    }
}

impl Service for Scrape<'_> {
    fn screen(&self, head: &SideHead) -> Option<Reply> {
        let path = head.path.as_str();
        match (self.page(path), head.method.as_str()) {
            (None, _) => Some(Reply::text(404, "metrics are /metrics\n")),
            (Some(_), "GET" | "HEAD") => None,
            (Some(_), _) => Some(Reply::not_allowed(path, "GET, HEAD")),
        }
    }

    fn answer(&self, request: SideRequest) -> Reply {
        match self.page(&request.head.path) {
            Some(Page::Metrics) => {
                let mut body = (self.page)();
                if let Some(truth) = self.truth {
                    truth().prometheus(&mut body);
                }
                Reply::ok("text/plain; version=0.0.4; charset=utf-8", body)
            }
            Some(Page::Truth) => Reply::json(self.truth.map(|t| t().json()).unwrap_or_default()),
            None => Reply::text(404, "metrics are /metrics\n"),
        }
    }
}
