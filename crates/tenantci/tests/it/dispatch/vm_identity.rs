//! Executor identity for VM executors (issue 15): a sandbox runs no SPIRE agent, so the
//! dispatcher, an admin workload at the SPIRE server, mints each VM task's X509-SVID
//! (`MintX509SVID`, the simulator's SPIRE stand-in) and hands it to the sandbox in its env; the
//! boot script's `executor-proxy` presents it from spiffe-helper style files
//! (tenantci_testkit::executor::PodProxy::for_sandbox plays that part), and the facade serves
//! the task only to that SVID with that task's capability.

use tenantci_core::forge::gitea::client::ClientError;
use tenantci_core::forge::gitea::connect::Code;
use tenantci_testkit::executor::{Executor, PodProxy};
use tenantci_testkit::wait::eventually;

use super::harness::{DISPATCHER_ENTRY, FACADE_ID, TD, World};
use crate::util::{assert_exit, stderr, tenantci};
use tenantci_dispatch::backend::vm::desired::env;

/// The ID the default template gives a job of the Gitea double (repository `sim/demo`).
fn task_id(job: &str) -> String {
    format!("spiffe://{TD}/gitea/sim/demo/{job}")
}

/// A world with the SPIRE stand-in, the VM backend at `vm_capacity` (no Pods) and identity on;
/// the dispatcher's entry is an admin one when `admin`.
async fn world(vm_capacity: u32, admin: bool) -> World {
    let mut w = World::start_with_spire(1).await;
    let key = w.opensandbox.api_key_file.clone();
    w.with_vm(vm_capacity, &key);
    w.with_vm_identity(admin).await;
    w
}

/// Waits until `task`'s sandbox exists; the sandbox as the double's admin view shows it.
async fn sandbox(w: &World, task: i64) -> serde_json::Value {
    eventually("the task's VM sandbox", || async {
        w.sandboxes_of(task).await.into_iter().next()
    })
    .await
}

/// The mints the stand-in made for `spiffe_id`.
async fn mints_for(w: &World, spiffe_id: &str) -> Vec<serde_json::Value> {
    let spire = w.spire.as_ref().unwrap();
    spire
        .minted(w.http())
        .await
        .into_iter()
        .filter(|m| m["spiffeId"] == spiffe_id)
        .collect()
}

/// Claims a new vm job `name` and waits until the dispatcher logged that it has no SVID for
/// it yet (a refused or unanswered mint); no sandbox and no mint for it then. Its task id.
async fn waiting_for_its_svid(w: &World, d: &super::harness::Dispatcher, name: &str) -> i64 {
    let job = w.enqueue_vm(name, &format!("secret-{name}")).await;
    let task = w.claimed(job).await;
    eventually(
        "the dispatcher to log the mint it could not make",
        || async {
            d.log_text()
                .contains(&format!("no SVID for task {task} from the SPIRE server"))
                .then_some(())
        },
    )
    .await;
    assert!(
        w.sandboxes_of(task).await.is_empty(),
        "no sandbox without its SVID"
    );
    assert!(mints_for(w, &task_id(name)).await.is_empty());
    task
}

/// `task` (job `name`) runs to SUCCESS once through its sandbox's proxy, with one mint, and
/// its sandbox is deleted.
async fn runs_once_with_one_mint(w: &World, task: i64, name: &str) {
    let s = sandbox(w, task).await;
    let proxy = PodProxy::for_sandbox(tenantci(), &s);
    Executor::through_sandbox(&s, &proxy).run(task).await;
    w.assert_succeeded_once(task).await;
    w.no_sandboxes_left().await;
    assert_eq!(mints_for(w, &task_id(name)).await.len(), 1);
}

/// Two vm tasks: each sandbox gets its own task's minted SVID (env, not the facade's CA), the
/// mint was made by the dispatcher's ID; task A's SVID with task B's capability is refused.
/// kill -9 of the dispatcher mid-task: the restarted one finds the sandboxes and mints
/// nothing again; both tasks run to SUCCESS through their proxies, once, and no sandbox is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vm_tasks_run_with_minted_svids_and_a_restart_mints_nothing_again() {
    let w = world(2, true).await;
    let mut d = w.dispatcher("d1").await;
    let ja = w.enqueue_vm("vm-a", "secret-a").await;
    let jb = w.enqueue_vm("vm-b", "secret-b").await;
    let (ta, tb) = (w.claimed(ja).await, w.claimed(jb).await);
    let (sa, sb) = (sandbox(&w, ta).await, sandbox(&w, tb).await);
    for s in [&sa, &sb] {
        for k in [env::SVID, env::SVID_KEY, env::SVID_BUNDLE] {
            assert!(s["env"][k].is_string(), "{k} in {s}");
        }
        assert!(
            s["env"][env::FACADE_CA].is_null(),
            "no CA with identity on: {s}"
        );
    }
    for job in ["vm-a", "vm-b"] {
        let mints = mints_for(&w, &task_id(job)).await;
        assert_eq!(mints.len(), 1, "{mints:?}");
        assert_eq!(mints[0]["callerId"], FACADE_ID, "{mints:?}");
    }

    let proxy_a = PodProxy::for_sandbox(tenantci(), &sa);
    let proxy_b = PodProxy::for_sandbox(tenantci(), &sb);
    // Task A's SVID with task B's capability: refused, and task B is not disturbed.
    let crossed = Executor::through_sandbox(&sb, &proxy_a);
    match crossed.declare_once().await {
        Err(ClientError::Status { error, .. }) => {
            assert_eq!(error.code, Code::PermissionDenied, "{error:?}")
        }
        other => panic!("expected permission_denied, got {other:?}"),
    }

    d.kill9();
    let d = w.dispatcher("d1").await;
    Executor::through_sandbox(&sa, &proxy_a).run(ta).await;
    Executor::through_sandbox(&sb, &proxy_b).run(tb).await;
    w.assert_ran_once(&[ja, jb]).await;
    w.no_sandboxes_left().await;
    for job in ["vm-a", "vm-b"] {
        assert_eq!(
            mints_for(&w, &task_id(job)).await.len(),
            1,
            "minted once: {job}"
        );
    }
    let stats = w.sandbox_stats().await;
    assert_eq!(stats["created"], 2, "one sandbox per task: {stats}");
    assert_eq!(
        d.metric("tenantci_dispatch_spire_mint_errors_total").await,
        Some(0.0)
    );
    let log = d.log_text();
    for secret in ["secret-a", "secret-b", "BEGIN PRIVATE KEY"] {
        assert!(!log.contains(secret), "{secret} in the dispatcher's log");
    }
}

/// A dispatcher the SPIRE server does not mint for (its entry is no admin one): the vm task's
/// sandbox is not created and the task waits, queued; once the operator makes the entry an
/// admin one, the task's SVID is minted, its sandbox created, and it runs to SUCCESS once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_mint_costs_latency_only() {
    let w = world(1, false).await;
    let d = w.dispatcher("d1").await;
    let task = waiting_for_its_svid(&w, &d, "vm-wait").await;
    let refused = d.metric("tenantci_dispatch_spire_mint_errors_total").await;
    assert!(refused >= Some(1.0), "counted: {refused:?}");
    w.make_admin(DISPATCHER_ENTRY).await;
    runs_once_with_one_mint(&w, task, "vm-wait").await;
}

/// A SPIRE server that presents another SPIFFE ID than `identity.server_id` is a configuration
/// error said at start: `dispatch run` exits 2 naming the server and the setting, before
/// anything listens or claims (one sentence, no key material).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dispatch_run_refuses_a_spire_server_that_is_not_the_configured_one() {
    let mut w = world(1, true).await;
    if let Some(identity) = w.base_mut().identity.as_mut() {
        identity.server_id = Some(format!("spiffe://{TD}/not/the/server"));
    }
    let out = w.run_dispatcher_to_exit("d1");
    assert_exit(&out, 2);
    let err = stderr(&out);
    let spire = w.spire.as_ref().unwrap();
    assert!(
        err.contains(&format!(
            "the TLS handshake with the SPIRE server at {} was refused",
            spire.server_address
        )) && err.contains("identity.server_id"),
        "{err}"
    );
    assert!(!err.contains("PRIVATE KEY"), "{err}");
    assert_eq!(w.fetch_calls().await, 0, "nothing claimed");
}

/// The SPIRE server down (its address accepts and closes every connection, as a Service with
/// no ready endpoint): the dispatcher starts all the same (logged), the vm task waits with no
/// sandbox; once the server is back at that address, the SVID is minted and the task runs to
/// SUCCESS once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_spire_server_down_costs_latency_only() {
    let mut w = world(1, true).await;
    let forward = tenantci_testkit::forward::Forward::start().await;
    if let Some(identity) = w.base_mut().identity.as_mut() {
        identity.server_address = Some(forward.addr().to_string());
    }
    let d = w.dispatcher("d1").await;
    assert!(
        d.log_text()
            .contains("the SPIRE Server API does not answer yet"),
        "{}",
        d.log_text()
    );
    let task = waiting_for_its_svid(&w, &d, "vm-down").await;
    let spire = w.spire.as_ref().unwrap();
    forward.point_at(spire.server_address.parse().unwrap());
    runs_once_with_one_mint(&w, task, "vm-down").await;
}
