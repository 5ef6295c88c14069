//! Compile-time checks: graphs, handles and run futures cross threads.

use std::future::Future;

use tollgate::{CompiledGraph, EventSink, EventStream, Executor, RunConfig, RunHandle, RunId};

use crate::support::Trace;

fn send<T: std::marker::Send>() {}
fn sync<T: Sync>() {}
fn send_future<F: Future + std::marker::Send>(_: F) {}

#[allow(dead_code, clippy::needless_pass_by_value)]
fn run_futures_are_send(
    executor: Executor,
    graph: CompiledGraph<Trace>,
    handle: RunHandle<Trace>,
    run: RunId,
) {
    send_future(executor.run(&graph, Trace::default(), RunConfig::new()));
    send_future(executor.start(&graph, Trace::default(), RunConfig::new()));
    send_future(executor.continue_run(&graph, run, RunConfig::new()));
    send_future(handle.wait());
}

#[test]
fn graphs_handles_and_executors_are_send_and_sync() {
    send::<CompiledGraph<Trace>>();
    sync::<CompiledGraph<Trace>>();
    send::<Executor>();
    sync::<Executor>();
    send::<RunHandle<Trace>>();
    sync::<RunHandle<Trace>>();
    send::<RunConfig>();
    sync::<RunConfig>();
    send::<EventSink>();
    send::<EventStream>();
}
