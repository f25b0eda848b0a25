//! A one-request HTTP/1.1 client for the broker's JSON endpoints.

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::config::EndpointArgs;

/// `GET path`, with the token if one is configured; the body as JSON.
pub async fn get_json(endpoint: &EndpointArgs, path: &str) -> anyhow::Result<Value> {
    let authority = super::agent::authority(endpoint);
    let stream = TcpStream::connect(&authority).await.map_err(|e| super::agent::unreachable(&authority, &e))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.context("HTTP handshake")?;
    tokio::spawn(connection);
    let mut request = hyper::Request::get(path).header(hyper::header::HOST, &authority);
    if let Some(token) = &endpoint.auth_token {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response =
        sender.send_request(request.body(Empty::<Bytes>::new())?).await.with_context(|| format!("GET {path}"))?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    let value: Value =
        serde_json::from_slice(&body).with_context(|| format!("GET {path}: HTTP {status}, body is not JSON"))?;
    if !status.is_success() {
        let why = value["error"].as_str().unwrap_or("(no reason given)");
        bail!("GET {path}: HTTP {status}: {why}");
    }
    Ok(value)
}
