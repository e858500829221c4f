//! `check --wait` against real agents during a simulated rollout: limits
//! raised while it waits, an agent restarted as a "replaced machine" (new
//! boot id), and a node set that grows through `--nodes-cmd`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod check_support;

use std::time::{Duration, Instant};

use check_support::{args, free_port, node_list, write_atomic, Agent, AgentSpec, CheckProc};

const SYSCTL: &str = "--sysctl=user.max_user_namespaces=11255";

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

#[test]
fn wait_exits_0_soon_after_the_last_node_converges_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let boot_file = dir.path().join("boot_id");
    std::fs::write(&boot_file, "00000000-feed-4bad-beef-000000000001\n").unwrap();

    let ok = Agent::start(AgentSpec::on_port(11255, free_port()));
    let slow = Agent::start(AgentSpec::on_port(0, free_port()));
    let mut restarted = Agent::start(AgentSpec::on_port(0, free_port()));
    let list = node_list(&[&ok, &slow, &restarted]);

    let proc = CheckProc::spawn(&args(&[
        "-n",
        &list,
        SYSCTL,
        "--require-userns",
        "--wait",
        "60s",
    ]));
    sleep_ms(1500);

    // The machine behind one node is replaced: the agent dies, and comes
    // back on the same address with another boot id.
    restarted.kill();
    sleep_ms(800);
    let mut spec = restarted.spec.clone();
    spec.boot_id_file = Some(boot_file.clone());
    let restarted = Agent::start(spec);
    sleep_ms(1000);

    slow.set_limit(11255);
    sleep_ms(1000);
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
    let r = restarted.addr().to_string();
    let s = slow.addr().to_string();
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
        .position(|l| l.contains(&r) && (l.contains("retrying in") || l.contains("stream")))
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
    let a = Agent::start(AgentSpec::on_port(0, free_port()));
    let b = Agent::start(AgentSpec::on_port(11255, free_port()));
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
    let a = Agent::start(AgentSpec::on_port(0, free_port()));
    let mut proc = CheckProc::spawn(&args(&[
        "-n",
        &a.addr().to_string(),
        SYSCTL,
        "--wait",
        "60s",
    ]));
    sleep_ms(1500);
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
            a.addr()
        )),
        "{}",
        run.stdout
    );
}

#[test]
fn wait_follows_nodes_cmd_and_needs_the_expected_count() {
    let dir = tempfile::tempdir().unwrap();
    let listing = dir.path().join("nodes.txt");
    let a = Agent::start(AgentSpec::on_port(11255, free_port()));
    let b = Agent::start(AgentSpec::on_port(11255, free_port()));
    write_atomic(&listing, &format!("{}\n{}\n", a.addr(), b.addr()));

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
    sleep_ms(2000);
    assert!(proc.running(), "succeeded with two of three nodes");

    // The rollout adds the third machine, not yet converged.
    let c = Agent::start(AgentSpec::on_port(0, free_port()));
    write_atomic(
        &listing,
        &format!("# pool gvisor\n{}\n{}\n{}\n", a.addr(), b.addr(), c.addr()),
    );
    sleep_ms(2000);
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
    let ca = c.addr().to_string();
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
    let d = Agent::start(AgentSpec::on_port(0, free_port()));
    write_atomic(&listing, &format!("{}\n{}\n", a.addr(), d.addr()));
    let mut proc = CheckProc::spawn(&args(&[
        "--nodes-cmd",
        &cmd,
        "--nodes-cmd-interval",
        "300ms",
        SYSCTL,
        "--wait",
        "60s",
    ]));
    sleep_ms(1500);
    assert!(proc.running());
    write_atomic(&listing, &format!("{}\n", a.addr()));
    let run = proc.finish(Duration::from_secs(20));
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("{}: removed", d.addr())),
        "{}",
        run.stderr
    );
    assert!(run.stdout.ends_with("1/1 converged\n"), "{}", run.stdout);
}
