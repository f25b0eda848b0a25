//! Method routing: one table per daemon mapping names to typed async handlers.
//!
//! Params are deserialised with serde before the handler runs, so a handler never
//! sees malformed input, and a mismatch becomes -32602 with the path of the field
//! that was wrong (`arguments.code: invalid type: integer, expected a string`).
//! Handlers return `Result<T, RpcError>`; `T` is serialised straight into the
//! response, with no `serde_json::Value` in between.
//!
//! Two kinds of handler: `method` (async, with a [`Ctx`]) and `method_now`
//! (answers at once with the connection's [`ConnCtx`], or hands back a future
//! when it must wait), for methods like `ping` that almost never wait: the
//! connection's read loop runs them inline, with no future, no per-call
//! context and no allocation but the response.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rustc_hash::FxHashMap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::message::{self, Id, RpcError};
use crate::peer::ctx::{ConnCtx, Ctx};

/// Params for a method that takes none. Accepts anything (including absent
/// params), because rejecting `{}` from a client that always sends it helps no one.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoParams;

impl<'de> Deserialize<'de> for NoParams {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| NoParams)
    }
}

/// A handler's answer, already serialised: the whole success response to the
/// request's id (the result written straight into it, with no copy in
/// between), or nothing for a notification, whose result no one reads.
pub type HandlerFuture = BoxFuture<'static, Result<Vec<u8>, RpcError>>;

/// Which route a connection's last call took ([`Router::start`]): kept by
/// the connection from call to call.
#[derive(Clone, Copy, Debug, Default)]
pub struct LastRoute(Option<u32>);

/// A handler started: answered already (the whole success response
/// appended to the reply buffer it was given; nothing for a notification),
/// or running.
pub enum Started {
    Done,
    Running(HandlerFuture),
}

/// What a `method_now` handler returns: its answer now, or, when it has to
/// wait, a future of it.
pub enum Answer<R> {
    Now(Result<R, RpcError>),
    Later(BoxFuture<'static, Result<R, RpcError>>),
}

trait Handler<S>: Send + Sync {
    /// Parses the params and starts the handler for the call `id` (`None`
    /// for a notification) on connection `conn`.
    fn start(
        &self,
        conn: &Arc<ConnCtx<S>>,
        id: Option<&Id>,
        params: Option<&RawValue>,
        reply: &mut Vec<u8>,
    ) -> Result<Started, RpcError>;

    /// A `method_now` handler: starting it runs it.
    fn is_immediate(&self) -> bool {
        false
    }
}

struct Typed<F, P, R> {
    f: F,
    _types: PhantomData<fn(P) -> R>,
}

impl<S, F, P, R, Fut> Handler<S> for Typed<F, P, R>
where
    S: Send + Sync + 'static,
    F: Fn(Ctx<S>, P) -> Fut + Send + Sync,
    P: DeserializeOwned + 'static,
    R: Serialize + 'static,
    Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
{
    fn start(
        &self,
        conn: &Arc<ConnCtx<S>>,
        id: Option<&Id>,
        params: Option<&RawValue>,
        _: &mut Vec<u8>,
    ) -> Result<Started, RpcError> {
        let params: P = parse_params(params)?;
        let id = id.cloned();
        let fut = (self.f)(Ctx::on(conn, id.clone()), params);
        Ok(Started::Running(Box::pin(answering(id, fut))))
    }
}

struct Immediate<F, P, R> {
    f: F,
    _types: PhantomData<fn(P) -> R>,
}

impl<S, F, P, R> Handler<S> for Immediate<F, P, R>
where
    S: Send + Sync + 'static,
    F: Fn(&ConnCtx<S>, P) -> Answer<R> + Send + Sync,
    P: DeserializeOwned + 'static,
    R: Serialize + 'static,
{
    fn start(
        &self,
        conn: &Arc<ConnCtx<S>>,
        id: Option<&Id>,
        params: Option<&RawValue>,
        reply: &mut Vec<u8>,
    ) -> Result<Started, RpcError> {
        let params: P = parse_params(params)?;
        // The answer is read where the handler put it: moved out, it was a
        // stalled copy per call (2 % of a bridge's ping).
        match (self.f)(conn, params) {
            Answer::Now(Ok(ref value)) => {
                if let Some(id) = id {
                    message::response_into(reply, id, value).map_err(not_serialised)?;
                }
                Ok(Started::Done)
            }
            Answer::Now(Err(error)) => Err(error),
            Answer::Later(fut) => Ok(Started::Running(Box::pin(answering(id.cloned(), fut)))),
        }
    }

    fn is_immediate(&self) -> bool {
        true
    }
}

/// A handler's future, answering `id` with its result. A combinator rather
/// than an `async` block: a block that awaits a future it captured lays it
/// out twice (captured, then being awaited), and a forwarded `tools/call`'s
/// box was 1.6 KiB that way, past the allocator's small sizes.
fn answering<R: Serialize>(
    id: Option<Id>,
    fut: impl Future<Output = Result<R, RpcError>>,
) -> impl Future<Output = Result<Vec<u8>, RpcError>> {
    fut.map(move |result| respond_to(id.as_ref(), result?))
}

/// The success response to `id`, or nothing for a notification.
fn respond_to<R: Serialize>(id: Option<&Id>, value: R) -> Result<Vec<u8>, RpcError> {
    match id {
        Some(id) => respond(id, value),
        None => Ok(Vec::new()),
    }
}

/// The success response carrying a handler's result (a `Box<RawValue>`
/// passed through from another connection is written as its text).
fn respond<R: Serialize>(id: &Id, value: R) -> Result<Vec<u8>, RpcError> {
    message::response_with(id, &value).map_err(not_serialised)
}

fn not_serialised(e: serde_json::Error) -> RpcError {
    RpcError::internal(format!("result did not serialise: {e}"))
}

/// Deserialises params, absent ones as `{}` so that structs whose fields are all
/// optional work without params. Errors name the offending field.
///
/// A handler that takes `Box<RawValue>` gets the params as they came (absent
/// or `null` ones as `{}`), copied, not parsed again: the frame is valid
/// JSON already. For a hot method that reads its params itself.
pub fn parse_params<P: DeserializeOwned + 'static>(params: Option<&RawValue>) -> Result<P, RpcError> {
    // A method that takes none accepts anything, and the frame is valid JSON
    // already: nothing to read.
    if let Some(none) = (&mut Some(NoParams) as &mut dyn std::any::Any).downcast_mut::<Option<P>>() {
        return Ok(none.take().expect("just put there"));
    }
    let mut as_they_came = None::<P>;
    if let Some(slot) = (&mut as_they_came as &mut dyn std::any::Any).downcast_mut::<Option<Box<RawValue>>>() {
        let params = params.filter(|params| params.get() != "null").unwrap_or(message::empty_object());
        *slot = Some(params.to_owned());
        return Ok(as_they_came.expect("just put there"));
    }
    parse_params_at("", params)
}

/// Like [`parse_params`], for a value nested in the params (where `null` also
/// counts as absent): errors name the field under `prefix`
/// (`arguments.code: invalid type ...`).
pub fn parse_params_at<P: DeserializeOwned>(prefix: &str, params: Option<&RawValue>) -> Result<P, RpcError> {
    let text = match params.map(RawValue::get) {
        None | Some("null") => "{}",
        Some(text) => text,
    };
    // Plain serde on the way in; path tracking costs on every field, so it only
    // runs again, on the same text, to say where the problem is.
    if let Ok(params) = serde_json::from_str(text) {
        return Ok(params);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize::<_, P>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let at = match (prefix, path.as_str()) {
            ("", "." | "") => return RpcError::invalid_params(inner),
            ("", path) => path.to_owned(),
            (prefix, "." | "") => prefix.to_owned(),
            (prefix, path) => format!("{prefix}.{path}"),
        };
        RpcError::invalid_params(format!("{at}: {inner}"))
    })
}

/// What a guard decides about one incoming message.
pub enum Gate {
    /// Let it through.
    Open,
    /// Refuse it with this error.
    Closed(RpcError),
    /// Hold it until this resolves (e.g. until the peer's own `initialize`
    /// finished), then let it through or refuse it. The reader is not held:
    /// other messages, and answers to our own calls, keep flowing.
    Wait(BoxFuture<'static, Result<(), RpcError>>),
}

impl From<Result<(), RpcError>> for Gate {
    fn from(result: Result<(), RpcError>) -> Self {
        match result {
            Ok(()) => Gate::Open,
            Err(error) => Gate::Closed(error),
        }
    }
}

/// A guard sees a call's [`Ctx`] (a `gate` may keep it), or only the
/// connection's [`ConnCtx`] (`guard_conn`, `gate_conn`: then a call needs no
/// `Ctx` made for it).
enum Guard<S> {
    Call(CallGuard<S>),
    Conn(ConnGuard<S>),
}

type CallGuard<S> = Box<dyn Fn(&Ctx<S>, &str) -> Gate + Send + Sync>;
type ConnGuard<S> = Box<dyn Fn(&ConnCtx<S>, &str) -> Gate + Send + Sync>;
type Rewrite = Box<dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync>;
type BothPolicy = Box<dyn Fn(&RawValue, &RpcError) -> bool + Send + Sync>;

/// A daemon's method table, with the daemon's own hooks: a guard before every
/// method, and the dialect it tolerates on the wire. The engine itself knows
/// no dialect; a daemon that must accept one supplies it here.
pub struct Router<S> {
    /// The methods in the order they were registered, with their handlers.
    routes: Vec<(Box<str>, Arc<dyn Handler<S>>)>,
    /// Where each name is in `routes`.
    index: FxHashMap<Box<str>, u32>,
    guard: Option<Guard<S>>,
    rewrite: Option<Rewrite>,
    result_with_error: Option<BothPolicy>,
}

/// Building a router failed: the same method was registered twice.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("method(s) registered more than once: {}", .0.join(", "))]
pub struct DuplicateMethods(pub Vec<String>);

/// Collects methods; duplicates are reported together by [`RouterBuilder::build`].
pub struct RouterBuilder<S> {
    router: Router<S>,
    duplicates: Vec<String>,
}

impl<S: Send + Sync + 'static> Router<S> {
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> RouterBuilder<S> {
        RouterBuilder { router: Router::bare(), duplicates: Vec::new() }
    }

    /// A router with no methods, for the client side of a connection that only
    /// sends requests.
    pub fn empty() -> Arc<Self> {
        Arc::new(Router::bare())
    }

    fn bare() -> Router<S> {
        Router { routes: Vec::new(), index: FxHashMap::default(), guard: None, rewrite: None, result_with_error: None }
    }

    /// The handler of `method`. `last` is the route the connection's last
    /// call took: a connection tends to call one method again, and
    /// comparing the name with that route's costs less than hashing it and
    /// probing the table (3 % of a `ping` in the bridge's profile).
    fn handler(&self, method: &str, last: &mut LastRoute) -> Option<&Arc<dyn Handler<S>>> {
        if let Some((name, handler)) = last.0.and_then(|at| self.routes.get(at as usize))
            && **name == *method
        {
            return Some(handler);
        }
        let at = *self.index.get(method)?;
        last.0 = Some(at);
        Some(&self.routes[at as usize].1)
    }

    /// Runs the guard, finds the handler and parses params; the returned future
    /// runs the handler itself (a `method_now` one too: it runs when the
    /// future is first polled, in its turn, not now).
    pub fn dispatch(&self, ctx: Ctx<S>, method: &str, params: Option<&RawValue>) -> Result<HandlerFuture, RpcError> {
        let mut reply = Vec::new();
        let last = &mut LastRoute::default();
        Ok(match self.begin(ctx.conn(), ctx.request_id(), method, params, true, &mut reply, last)? {
            Started::Done => Box::pin(std::future::ready(Ok(reply))),
            Started::Running(run) => run,
        })
    }

    /// Runs the guard, finds the handler, parses params and starts it: a
    /// `method_now` handler has answered when this returns (unless it had to
    /// wait), an async one is a future to run. For a call that may start
    /// now; one that must wait its turn takes [`Router::dispatch`]. `last`
    /// is the connection's own, kept from call to call.
    pub fn start(
        &self,
        conn: &Arc<ConnCtx<S>>,
        id: Option<&Id>,
        method: &str,
        params: Option<&RawValue>,
        reply: &mut Vec<u8>,
        last: &mut LastRoute,
    ) -> Result<Started, RpcError> {
        self.begin(conn, id, method, params, false, reply, last)
    }

    /// [`Router::start`]; with `later`, a `method_now` handler is left to
    /// run when the returned future is first polled.
    #[allow(clippy::too_many_arguments)]
    fn begin(
        &self,
        conn: &Arc<ConnCtx<S>>,
        id: Option<&Id>,
        method: &str,
        params: Option<&RawValue>,
        later: bool,
        reply: &mut Vec<u8>,
        last: &mut LastRoute,
    ) -> Result<Started, RpcError> {
        let gate = match &self.guard {
            Some(Guard::Call(guard)) => guard(&Ctx::on(conn, id.cloned()), method),
            Some(Guard::Conn(guard)) => guard(conn, method),
            None => Gate::Open,
        };
        if let Gate::Closed(error) = gate {
            return Err(error);
        }
        let handler = self.handler(method, last).ok_or_else(|| RpcError::method_not_found(method))?;
        let until = match gate {
            Gate::Wait(until) => Some(until),
            _ => None,
        };
        if handler.is_immediate() && (later || until.is_some()) {
            // A `method_now` handler answers as it starts, so it starts only
            // in its turn (once the gate opens), with its params copied.
            let (handler, conn, id) = (handler.clone(), conn.clone(), id.cloned());
            let params = params.map(ToOwned::to_owned);
            return Ok(Started::Running(Box::pin(async move {
                if let Some(until) = until {
                    until.await?;
                }
                let mut reply = Vec::new();
                match handler.start(&conn, id.as_ref(), params.as_deref(), &mut reply)? {
                    Started::Done => Ok(reply),
                    Started::Running(run) => run.await,
                }
            })));
        }
        let started = handler.start(conn, id, params, reply)?;
        let Some(until) = until else { return Ok(started) };
        // An async handler is made now and run once the gate opens.
        let run = match started {
            Started::Done => Box::pin(std::future::ready(Ok(std::mem::take(reply)))),
            Started::Running(run) => run,
        };
        Ok(Started::Running(Box::pin(async move {
            until.await?;
            run.await
        })))
    }

    /// Offers a frame that is not valid JSON-RPC to the daemon's dialect.
    pub fn rewrite_invalid(&self, frame: &[u8]) -> Option<Vec<u8>> {
        self.rewrite.as_ref().and_then(|rewrite| rewrite(frame))
    }

    /// Whether a response carrying both `result` and `error` counts as its result.
    pub fn accepts_result_with_error(&self, result: &RawValue, error: &RpcError) -> bool {
        self.result_with_error.as_ref().is_some_and(|accept| accept(result, error))
    }
}

impl<S: Send + Sync + 'static> RouterBuilder<S> {
    /// Registers a method. The handler receives the connection context and the
    /// params deserialised as `P` (use [`NoParams`] for none).
    ///
    /// `f` itself is called when the request is read, even when the request
    /// then waits its turn (behind `max_concurrent` others, in a batch, at a
    /// gate) or is refused before it runs (a batch past the write budget,
    /// shutdown): it should only take what the future needs, and the work,
    /// above all anything with an effect or a large result, belongs in the
    /// future it returns. A handler that answers without waiting is a
    /// [`method_now`](Self::method_now) one, which runs only in its turn.
    pub fn method<P, R, F, Fut>(self, name: &str, f: F) -> Self
    where
        F: Fn(Ctx<S>, P) -> Fut + Send + Sync + 'static,
        P: DeserializeOwned + 'static,
        R: Serialize + 'static,
        Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
    {
        self.insert(name, Arc::new(Typed { f, _types: PhantomData }))
    }

    /// Registers a method that answers without waiting (or says when it
    /// must, with [`Answer::Later`]): it gets the connection's [`ConnCtx`]
    /// rather than a call's [`Ctx`], and the read loop runs it inline, so
    /// the call costs no future and no context (see the module doc). A call
    /// that cannot start at once runs `f` only when its turn comes.
    pub fn method_now<P, R, F>(self, name: &str, f: F) -> Self
    where
        F: Fn(&ConnCtx<S>, P) -> Answer<R> + Send + Sync + 'static,
        P: DeserializeOwned + 'static,
        R: Serialize + 'static,
    {
        self.insert(name, Arc::new(Immediate { f, _types: PhantomData }))
    }

    fn insert(mut self, name: &str, handler: Arc<dyn Handler<S>>) -> Self {
        let router = &mut self.router;
        match router.index.get(name) {
            Some(&at) => {
                router.routes[at as usize].1 = handler;
                self.duplicates.push(name.to_owned());
            }
            None => {
                let at = u32::try_from(router.routes.len()).expect("fewer than 2^32 methods");
                router.index.insert(name.into(), at);
                router.routes.push((name.into(), handler));
            }
        }
        self
    }

    /// A check run before every method, with the connection context: the place
    /// for "say hello first" and "agents may not register tools".
    pub fn guard(self, f: impl Fn(&Ctx<S>, &str) -> Result<(), RpcError> + Send + Sync + 'static) -> Self {
        self.gate(move |ctx, method| f(ctx, method).into())
    }

    /// A guard that may also hold a message until something is ready (see [`Gate`]).
    pub fn gate(mut self, f: impl Fn(&Ctx<S>, &str) -> Gate + Send + Sync + 'static) -> Self {
        self.router.guard = Some(Guard::Call(Box::new(f)));
        self
    }

    /// A guard that needs only the connection (its state), not the call: a
    /// call then needs no [`Ctx`] made for its guard.
    pub fn guard_conn(self, f: impl Fn(&ConnCtx<S>, &str) -> Result<(), RpcError> + Send + Sync + 'static) -> Self {
        self.gate_conn(move |conn, method| f(conn, method).into())
    }

    /// A gate that needs only the connection (its state), not the call: with
    /// it, a `method_now` handler answers in the read loop while the gate is
    /// open, with no [`Ctx`] made for the call.
    pub fn gate_conn(mut self, f: impl Fn(&ConnCtx<S>, &str) -> Gate + Send + Sync + 'static) -> Self {
        self.router.guard = Some(Guard::Conn(Box::new(f)));
        self
    }

    /// Rewrites frames that are not valid JSON-RPC (an older dialect of the same
    /// protocol) into JSON-RPC, before they would be answered -32600.
    pub fn rewrite_invalid(mut self, f: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        self.router.rewrite = Some(Box::new(f));
        self
    }

    /// Decides whether a response with both `result` and `error` (malformed,
    /// but what some clients send for a failed tool) counts as its result.
    /// Without it such a response fails the call as malformed.
    pub fn result_with_error(mut self, f: impl Fn(&RawValue, &RpcError) -> bool + Send + Sync + 'static) -> Self {
        self.router.result_with_error = Some(Box::new(f));
        self
    }

    pub fn build(self) -> Result<Arc<Router<S>>, DuplicateMethods> {
        if self.duplicates.is_empty() { Ok(Arc::new(self.router)) } else { Err(DuplicateMethods(self.duplicates)) }
    }
}

impl<S> Router<S> {
    /// The registered method names, sorted.
    pub fn methods(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.routes.iter().map(|(name, _)| &**name).collect();
        names.sort_unstable();
        names
    }
}

impl<S> fmt::Debug for Router<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router").field("methods", &self.methods()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Call {
        name: String,
        arguments: Args,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Args {
        code: String,
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn invalid_params_name_the_field() {
        let err = parse_params::<Call>(Some(&raw(r#"{"name":"x","arguments":{"code":1}}"#))).err().unwrap();
        assert_eq!(err.code, RpcError::INVALID_PARAMS);
        assert!(err.message.contains("arguments.code"), "{}", err.message);
        let err = parse_params::<Call>(Some(&raw(r#"{"arguments":{"code":"1"}}"#))).err().unwrap();
        assert!(err.message.contains("missing field `name`"), "{}", err.message);
    }

    #[test]
    fn nested_params_errors_carry_the_prefix() {
        let err = parse_params_at::<Args>("arguments", Some(&raw(r#"{"code":1}"#))).err().unwrap();
        assert!(err.message.contains("arguments.code: invalid type"), "{}", err.message);
        let err = parse_params_at::<Args>("arguments", Some(&raw("[]"))).err().unwrap();
        assert!(err.message.starts_with("Invalid params: arguments: "), "{}", err.message);
    }

    #[test]
    fn raw_params_come_as_they_came_and_absent_ones_as_an_empty_object() {
        let text = r#"{"name": "x", "arguments": {"code": "1+1"}}"#;
        assert_eq!(parse_params::<Box<RawValue>>(Some(&raw(text))).unwrap().get(), text);
        assert_eq!(parse_params::<Box<RawValue>>(Some(&raw("[1, 2]"))).unwrap().get(), "[1, 2]");
        assert_eq!(parse_params::<Box<RawValue>>(Some(&raw("null"))).unwrap().get(), "{}");
        assert_eq!(parse_params::<Box<RawValue>>(None).unwrap().get(), "{}");
    }

    #[test]
    fn positional_params_fill_struct_fields_in_order() {
        let call = parse_params::<Call>(Some(&raw(r#"["x", {"code": "1+1"}]"#))).unwrap();
        assert_eq!((call.name.as_str(), call.arguments.code.as_str()), ("x", "1+1"));
    }

    #[test]
    fn absent_params_work_for_no_params_and_optional_fields() {
        #[derive(Deserialize)]
        struct Opt {
            #[allow(dead_code)]
            lines: Option<u32>,
        }
        assert!(parse_params::<NoParams>(None).is_ok());
        assert!(parse_params::<NoParams>(Some(&raw("[1,2]"))).is_ok());
        assert!(parse_params::<Opt>(None).is_ok());
    }

    #[test]
    fn raw_results_pass_through_and_others_serialise() {
        let id = Id::Int(7);
        assert_eq!(
            respond(&id, raw(r#"{"a": [1, 2]}"#)).unwrap(),
            br#"{"jsonrpc":"2.0","id":7,"result":{"a": [1, 2]}}"#
        );
        assert_eq!(respond(&id, serde_json::json!({"a": 1})).unwrap(), br#"{"jsonrpc":"2.0","id":7,"result":{"a":1}}"#);
        assert_eq!(respond(&Id::from("x"), ()).unwrap(), br#"{"jsonrpc":"2.0","id":"x","result":null}"#);
    }

    /// A handler's box holds its future once: an `async` block awaiting a
    /// future it captured would lay it out twice, and a large one would
    /// leave the allocator's small sizes.
    #[test]
    fn a_handlers_future_is_boxed_at_its_own_size() {
        async fn big() -> Result<u8, RpcError> {
            let state = [7u8; 2048];
            tokio::task::yield_now().await;
            Ok(state[std::hint::black_box(5)])
        }
        let router = Router::<()>::new().method("big", |_, _: NoParams| big()).build().unwrap();
        let conn =
            Arc::new(ConnCtx { peer: crate::PeerHandle::new(crate::PeerConfig::default()), state: Arc::new(()) });
        let Ok(Started::Running(run)) =
            router.start(&conn, Some(&Id::Int(1)), "big", None, &mut Vec::new(), &mut LastRoute::default())
        else {
            panic!("an async handler runs")
        };
        let (own, boxed) = (std::mem::size_of_val(&big()), std::mem::size_of_val(&*run));
        assert!(boxed < own + 64, "{boxed} bytes boxed for a future of {own}");
    }

    #[test]
    fn duplicate_registration_is_an_error_at_build() {
        let err = Router::<()>::new()
            .method("ping", |_, _: NoParams| async { Ok(()) })
            .method("ping", |_, _: NoParams| async { Ok(()) })
            .method("other", |_, _: NoParams| async { Ok(()) })
            .build()
            .unwrap_err();
        assert_eq!(err, DuplicateMethods(vec!["ping".into()]));
    }
}
