//! Prometheus metrics: connections, sessions, calls by outcome, call latency.
//!
//! Everything touched per call is a plain atomic resolved at start-up: no label
//! map lookup and no lock on the call path (prometheus-client's own histogram
//! takes a mutex per observation, so the latency histogram here is atomic).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry};

use crate::sessions::{ClientType, Counts};

/// How a forwarded tools/call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    ToolError,
    Timeout,
    NoBrowser,
    BrowserDisconnected,
    UnknownTool,
    RateLimited,
    Malformed,
    NotJoined,
    /// The agent cancelled the call (`notifications/cancelled`) or went away.
    Cancelled,
}

impl Outcome {
    const ALL: [Outcome; 10] = [
        Outcome::Ok,
        Outcome::ToolError,
        Outcome::Timeout,
        Outcome::NoBrowser,
        Outcome::BrowserDisconnected,
        Outcome::UnknownTool,
        Outcome::RateLimited,
        Outcome::Malformed,
        Outcome::NotJoined,
        Outcome::Cancelled,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::Timeout => "timeout",
            Outcome::NoBrowser => "no_browser",
            Outcome::BrowserDisconnected => "browser_disconnected",
            Outcome::UnknownTool => "unknown_tool",
            Outcome::RateLimited => "rate_limited",
            Outcome::Malformed => "malformed",
            Outcome::NotJoined => "not_joined",
            Outcome::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    client_type: &'static str,
    transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// Which transport a peer uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    WebSocket,
    Sse,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::WebSocket => "websocket",
            TransportKind::Sse => "sse",
        }
    }
}

pub struct Metrics {
    registry: Registry,
    calls: Vec<(Outcome, Counter)>,
    latency: LatencyHistogram,
    connections: Family<PeerLabels, Gauge>,
    connections_opened: Family<PeerLabels, Counter>,
    rejected: Family<ReasonLabel, Counter>,
    sessions: Gauge,
    browsers: Gauge,
    agents: Gauge,
    cached_tool_bytes: Gauge,
    tool_lists_evicted: Counter,
    log_lines_dropped: Counter,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("btcp");
        let calls_family: Family<OutcomeLabel, Counter> =
            registered(&mut registry, "tool_calls", "tools/call requests by outcome");
        // One counter per outcome, resolved now: the call path does no label lookup.
        let calls = Outcome::ALL
            .iter()
            .map(|&o| (o, calls_family.get_or_create(&OutcomeLabel { outcome: o.label() }).clone()))
            .collect();
        Metrics {
            calls,
            latency: registered(
                &mut registry,
                "tool_call_duration_seconds",
                "Time from an agent's tools/call to the browser's answer (answered calls)",
            ),
            connections: registered(&mut registry, "connections", "Open browser and agent connections"),
            connections_opened: registered(
                &mut registry,
                "connections_opened",
                "Browser and agent connections accepted",
            ),
            rejected: registered(
                &mut registry,
                "rejected_requests",
                "Connections and requests refused before any upgrade, by reason",
            ),
            sessions: registered(&mut registry, "sessions", "Sessions held"),
            browsers: registered(&mut registry, "browsers", "Sessions with a browser"),
            agents: registered(&mut registry, "agents", "Agents joined to a session"),
            cached_tool_bytes: registered(
                &mut registry,
                "cached_tool_bytes",
                "Bytes of tool lists kept for browsers that have left (BTCP_TOOLS_BUDGET)",
            ),
            tool_lists_evicted: registered(
                &mut registry,
                "tool_lists_evicted",
                "Tool lists of departed browsers dropped to stay within BTCP_TOOLS_BUDGET",
            ),
            log_lines_dropped: registered(
                &mut registry,
                "log_lines_dropped",
                "Log lines dropped because stderr's reader was not keeping up or had gone",
            ),
            registry,
        }
    }

    pub fn call(&self, outcome: Outcome) {
        if let Some((_, counter)) = self.calls.iter().find(|(o, _)| *o == outcome) {
            counter.inc();
        }
    }

    pub fn call_latency(&self, elapsed: Duration) {
        self.latency.observe(elapsed);
    }

    pub fn peer_opened(&self, client_type: ClientType, transport: TransportKind) {
        let labels = PeerLabels { client_type: client_type.as_str(), transport: transport.as_str() };
        self.connections.get_or_create(&labels).inc();
        self.connections_opened.get_or_create(&labels).inc();
    }

    pub fn peer_closed(&self, client_type: ClientType, transport: TransportKind) {
        let labels = PeerLabels { client_type: client_type.as_str(), transport: transport.as_str() };
        self.connections.get_or_create(&labels).dec();
    }

    pub fn tool_lists_evicted(&self, count: usize) {
        if count > 0 {
            self.tool_lists_evicted.inc_by(count as u64);
        }
    }

    pub fn rejected(&self, reason: &'static str) {
        self.rejected.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// The OpenMetrics text, with the session gauges brought up to date.
    pub fn render(&self, counts: Counts) -> String {
        self.sessions.set(counts.sessions as i64);
        self.browsers.set(counts.browsers as i64);
        self.agents.set(counts.agents as i64);
        self.cached_tool_bytes.set(i64::try_from(counts.cached_tool_bytes).unwrap_or(i64::MAX));
        let dropped = rpc_core::log_sink::dropped_lines();
        self.log_lines_dropped.inc_by(dropped.saturating_sub(self.log_lines_dropped.get()));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// A new metric, registered under `name`; the registry keeps a handle to
/// the same cells, so what `Metrics` counts is what `render` shows.
fn registered<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0];

/// A histogram of durations kept in atomics (one add per bucket, count and sum).
#[derive(Clone, Default)]
pub struct LatencyHistogram {
    inner: Arc<HistogramCells>,
}

#[derive(Default)]
struct HistogramCells {
    /// One per bound in `BUCKETS`, plus +Inf; not cumulative.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyHistogram").field("count", &self.inner.count.load(Ordering::Relaxed)).finish()
    }
}

impl LatencyHistogram {
    pub fn observe(&self, elapsed: Duration) {
        let cells = &*self.inner;
        let seconds = elapsed.as_secs_f64();
        let index = BUCKETS.iter().position(|&bound| seconds <= bound).unwrap_or(BUCKETS.len());
        cells.buckets[index].fetch_add(1, Ordering::Relaxed);
        cells.count.fetch_add(1, Ordering::Relaxed);
        cells.sum_nanos.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let cells = &*self.inner;
        let buckets: Vec<(f64, u64)> = BUCKETS
            .iter()
            .copied()
            .chain([f64::MAX])
            .zip(cells.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        let sum = cells.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, cells.count.load(Ordering::Relaxed), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_has_calls_by_outcome_and_the_latency_histogram() {
        let metrics = Metrics::new();
        metrics.call(Outcome::Ok);
        metrics.call(Outcome::Timeout);
        metrics.call_latency(Duration::from_millis(3));
        metrics.peer_opened(ClientType::Browser, TransportKind::WebSocket);
        metrics.tool_lists_evicted(3);
        let text = metrics.render(Counts { sessions: 2, browsers: 1, agents: 0, cached_tool_bytes: 42 });
        assert!(text.contains("btcp_tool_calls_total{outcome=\"ok\"} 1"), "{text}");
        assert!(text.contains("btcp_tool_calls_total{outcome=\"timeout\"} 1"), "{text}");
        assert!(text.contains("btcp_tool_call_duration_seconds_bucket{le=\"0.005\"} 1"), "{text}");
        assert!(text.contains("btcp_tool_call_duration_seconds_count 1"), "{text}");
        assert!(text.contains("btcp_sessions 2"), "{text}");
        assert!(text.contains("btcp_tool_lists_evicted_total 3"), "{text}");
        assert!(text.contains("btcp_cached_tool_bytes 42"), "{text}");
        assert!(text.contains("btcp_connections{client_type=\"browser\",transport=\"websocket\"} 1"), "{text}");
    }
}
