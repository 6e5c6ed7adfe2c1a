//! The stand-in's admin API for tests, plain HTTP on loopback: `GET /entries` lists the
//! entries served (socket, SPIFFE ID, serial of the current SVID); `POST /rotate` issues each
//! a new SVID and pushes it to open Workload API streams, answering the entries after;
//! `GET /minted` lists the SVIDs the Server API double minted, in order.

use std::sync::Arc;

use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::net::TcpListener;

use super::stand_in::{EntryView, MintRecord, StandIn};
use crate::served::Served;
use tenantci_core::{Error, Result};

/// The admin routes over `stand_in`: `GET /entries`, `GET /minted`, `POST /rotate`.
pub fn router(stand_in: Arc<StandIn>) -> Router {
    let list = stand_in.clone();
    let minted = stand_in.clone();
    Router::new()
        .route(
            "/entries",
            get(move || {
                let s = list.clone();
                async move { Json::<Vec<EntryView>>(s.entries()) }
            }),
        )
        .route(
            "/minted",
            get(move || {
                let s = minted.clone();
                async move { Json::<Vec<MintRecord>>(s.minted()) }
            }),
        )
        .route(
            "/rotate",
            post(move || {
                let s = stand_in.clone();
                async move { Json::<Vec<EntryView>>(s.rotate()) }
            }),
        )
}

/// Serves the admin API on a free loopback port; returns it and its base URL.
pub async fn start(stand_in: Arc<StandIn>) -> Result<(Served, String)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
        Error::external(format!(
            "cannot listen for the SPIRE stand-in's admin API: {e}"
        ))
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::external(format!("cannot read the listen address: {e}")))?;
    let served = Served::spawn(listener, router(stand_in), "the SPIRE stand-in's admin API");
    Ok((served, format!("http://{addr}")))
}
