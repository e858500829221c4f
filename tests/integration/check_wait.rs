//! `check --wait` against real agents during a simulated rollout: limits
//! raised while it waits, an agent restarted as a "replaced machine" (new
//! boot id), and a node set that grows through `--nodes-cmd`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{args, node_list, write_atomic, Agent, AgentSpec, CheckProc};

const SYSCTL: &str = "--sysctl=user.max_user_namespaces=11255";
/// How long a change may take to show in `check`'s output: generous, since
/// only a failure waits this long.
const SHOWN: Duration = Duration::from_secs(20);

#[test]
fn wait_exits_0_soon_after_the_last_node_converges_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let boot_file = dir.path().join("boot_id");
    std::fs::write(&boot_file, "00000000-feed-4bad-beef-000000000001\n").unwrap();

    let ok = Agent::spawn(AgentSpec::pool_member(11255));
    let slow = Agent::spawn(AgentSpec::pool_member(0));
    let mut restarted = Agent::spawn(AgentSpec::pool_member(0));
    let list = node_list(&[&ok, &slow, &restarted]);

    let proc = CheckProc::spawn(&args(&[
        "-n",
        &list,
        SYSCTL,
        "--require-userns",
        "--wait",
        "60s",
    ]));
    let (r, s) = (restarted.addr.to_string(), slow.addr.to_string());
    proc.stderr().wait_lines(
        &[
            &format!("{s}: not converged"),
            &format!("{r}: not converged"),
        ],
        SHOWN,
    );

    // The machine behind one node is replaced: the agent dies, and comes
    // back on the same address with another boot id.
    restarted.kill();
    // Seen as a broken stream or a refused reconnect.
    let noticed_loss =
        |l: &String| l.contains(&r) && (l.contains("retrying in") || l.contains("stream"));
    proc.stderr()
        .wait_for(SHOWN, |lines| lines.iter().any(noticed_loss).then_some(()))
        .unwrap_or_else(|e| panic!("the restart was not noticed: {e}"));
    let mut spec = restarted.same_addresses();
    spec.boot_id_file = Some(boot_file.clone());
    let restarted = Agent::spawn(spec);
    proc.stderr()
        .wait_line(&format!("{r}: boot id changed"), SHOWN);

    slow.set_limit(11255);
    proc.stderr().wait_line(&format!("{s}: converged"), SHOWN);
    let mut proc = proc;
    assert!(proc.running(), "check ended while a node was still at 0");
    let last_raised = Instant::now();
    restarted.set_limit(11255);
    let run = proc.finish(Duration::from_secs(60));

    let after_last = last_raised.elapsed();
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        after_last < Duration::from_secs(5),
        "exited {after_last:?} after the last node converged"
    );
    let err = &run.stderr;
    // Plain output (stderr is a pipe): one line per change.
    for want in [
        format!("{s}: not converged: user.max_user_namespaces is 0, expected 11255"),
        format!("{s}: converged"),
        format!("{r}: boot id changed"),
        format!("{r}: converged"),
    ] {
        assert!(err.contains(&want), "missing {want:?} in:\n{err}");
    }
    // The restart showed as a broken stream or a refused reconnect, then recovered.
    let lost = err
        .lines()
        .map(String::from)
        .position(|l| noticed_loss(&l))
        .unwrap_or_else(|| panic!("the restart was not noticed:\n{err}"));
    let back = err
        .lines()
        .collect::<Vec<_>>()
        .iter()
        .rposition(|l| l.contains(&format!("{r}: converged")))
        .unwrap();
    assert!(back > lost, "{err}");
    assert!(
        !err.contains('\r'),
        "no progress redraws without a terminal"
    );
    assert!(run.stdout.ends_with("3/3 converged\n"), "{}", run.stdout);
    assert!(
        run.stdout.contains("(rebooted 1x while watched)"),
        "{}",
        run.stdout
    );
}

#[test]
fn wait_times_out_with_exit_1_and_the_state_so_far() {
    let a = Agent::spawn(AgentSpec::pool_member(0));
    let b = Agent::spawn(AgentSpec::pool_member(11255));
    let proc = CheckProc::spawn(&args(&[
        "-n",
        &node_list(&[&a, &b]),
        SYSCTL,
        "--wait",
        "2s",
        "-o",
        "json",
    ]));
    let run = proc.finish(Duration::from_secs(20));
    assert_eq!(run.code(), 1);
    assert!(
        run.took >= Duration::from_secs(2) && run.took < Duration::from_secs(4),
        "{:?}",
        run.took
    );
    assert!(
        run.stderr.contains("not converged within 2s"),
        "{}",
        run.stderr
    );
    let doc = run.json();
    assert_eq!(doc["nodesConverged"], 1);
    assert_eq!(doc["nodesTotal"], 2);
}

#[test]
fn ctrl_c_prints_the_state_so_far() {
    let a = Agent::spawn(AgentSpec::pool_member(0));
    let mut proc = CheckProc::spawn(&args(&["-n", &a.addr.to_string(), SYSCTL, "--wait", "60s"]));
    // Interrupted once it has the first state (the handler is in place by then).
    proc.stderr()
        .wait_line(&format!("{}: not converged", a.addr), SHOWN);
    assert!(proc.running());
    let pid = proc.pid();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let run = proc.finish(Duration::from_secs(10));
    assert_eq!(run.code(), 1);
    assert!(run.took < Duration::from_secs(5));
    assert!(
        run.stderr.contains("interrupted; the state so far:"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.ends_with(&format!(
            "0/1 converged; {}: user.max_user_namespaces is 0, expected 11255\n",
            a.addr
        )),
        "{}",
        run.stdout
    );
}

#[test]
fn wait_follows_nodes_cmd_and_needs_the_expected_count() {
    let dir = tempfile::tempdir().unwrap();
    let listing = dir.path().join("nodes.txt");
    let a = Agent::spawn(AgentSpec::pool_member(11255));
    let b = Agent::spawn(AgentSpec::pool_member(11255));
    write_atomic(&listing, &format!("{}\n{}\n", a.addr, b.addr));

    let cmd = format!("cat '{}'", listing.display());
    let mut proc = CheckProc::spawn(&args(&[
        "--nodes-cmd",
        &cmd,
        "--nodes-cmd-interval",
        "300ms",
        "--expect-nodes",
        "3",
        SYSCTL,
        "--wait",
        "60s",
    ]));
    // Two nodes, both converged: not enough.
    proc.stderr().wait_lines(
        &[
            &format!("{}: converged", a.addr),
            &format!("{}: converged", b.addr),
        ],
        SHOWN,
    );
    assert!(proc.running(), "succeeded with two of three nodes");

    // The rollout adds the third machine, not yet converged.
    let c = Agent::spawn(AgentSpec::pool_member(0));
    write_atomic(
        &listing,
        &format!("# pool gvisor\n{}\n{}\n{}\n", a.addr, b.addr, c.addr),
    );
    // Added and seen unconverged: check kept running past two of three.
    proc.stderr().wait_lines(
        &[
            &format!("{}: added", c.addr),
            &format!("{}: not converged", c.addr),
        ],
        SHOWN,
    );
    assert!(proc.running(), "succeeded before the third node converged");

    let raised = Instant::now();
    c.set_limit(11255);
    let run = proc.finish(Duration::from_secs(60));
    assert_eq!(run.code(), 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        raised.elapsed() < Duration::from_secs(5),
        "{:?}",
        raised.elapsed()
    );
    let ca = c.addr.to_string();
    assert!(
        run.stderr.contains(&format!("{ca}: added")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!("{ca}: not converged")),
        "{}",
        run.stderr
    );
    assert!(run.stdout.ends_with("3/3 converged\n"), "{}", run.stdout);

    // A node the command stops listing is dropped.
    let d = Agent::spawn(AgentSpec::pool_member(0));
    write_atomic(&listing, &format!("{}\n{}\n", a.addr, d.addr));
    let mut proc = CheckProc::spawn(&args(&[
        "--nodes-cmd",
        &cmd,
        "--nodes-cmd-interval",
        "300ms",
        SYSCTL,
        "--wait",
        "60s",
    ]));
    proc.stderr()
        .wait_line(&format!("{}: not converged", d.addr), SHOWN);
    assert!(proc.running());
    write_atomic(&listing, &format!("{}\n", a.addr));
    let run = proc.finish(Duration::from_secs(20));
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("{}: removed", d.addr)),
        "{}",
        run.stderr
    );
    assert!(run.stdout.ends_with("1/1 converged\n"), "{}", run.stdout);
}
