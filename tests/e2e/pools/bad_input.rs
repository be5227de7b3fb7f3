//! Bad pool flags and routes-file pools: statico exits 2 before binding, naming the flag or the
//! file and line, and the bad part.

use statico_tests::{run_to_exit, scratch_dir};

/// Runs statico with `args` on a port another socket holds, expecting exit 2 (a parse error,
/// before binding: binding first would fail with exit 1) with one stderr line containing each of
/// `names`; returns that line, or what was wrong.
fn refused(args: &[&str], names: &[&str]) -> Result<String, String> {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    let all = [&["-a", "127.0.0.1", "-p", &port][..], args].concat();
    let (code, err) = run_to_exit(&all);
    if code != Some(2) {
        return Err(format!("{args:?}: exit {code:?}, not 2: {err}"));
    }
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
        .collect();
    if lines.len() != 1 {
        return Err(format!("{args:?}: not one line: {err}"));
    }
    match names.iter().find(|name| !lines[0].contains(*name)) {
        Some(name) => Err(format!("{args:?} should name {name:?}: {err}")),
        None => Ok(lines[0].to_string()),
    }
}

/// Fails with every case's complaint at once.
fn all_refused(failures: Vec<String>) {
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn bad_pool_flags_exit_2_naming_the_flag_and_the_bad_part() {
    let cases: [(&[&str], &[&str]); 14] = [
        (&["--route", "/x pool=nope"], &["--route", "nope"]),
        (
            &[
                "--pool",
                "db capacity=1",
                "--pool",
                "db capacity=2",
                "--route",
                "/x pool=db",
            ],
            &["--pool", "db", "twice"],
        ),
        // Defined twice with no route using it yet: still two definitions of one name.
        (
            &["--pool", "db capacity=1", "--pool", "db capacity=2"],
            &["--pool", "db", "twice"],
        ),
        (&["--route", "/x capacity=0"], &["--route", "capacity"]),
        (&["--pool", "db capacity=0"], &["--pool", "capacity"]),
        (&["--pool", "db"], &["--pool", "capacity"]),
        (&["--route", "/x queue=10"], &["--route", "queue"]),
        (
            &["--route", "/x queue-timeout=1s"],
            &["--route", "queue-timeout"],
        ),
        (&["--route", "/x shed=429"], &["--route", "shed"]),
        (
            &["--route", "/x capacity=1 shed=teapot"],
            &["--route", "teapot"],
        ),
        (
            &["--pool", "db capacity=1 shed=teapot"],
            &["--pool", "teapot"],
        ),
        (
            &["--route", "/x delay=inflight:x:y"],
            &["--route", "inflight:x:y"],
        ),
        (
            &["--route", "/x delay=inflight:1ms"],
            &["--route", "inflight:1ms"],
        ),
        (
            &[
                "--pool",
                "db capacity=1",
                "--route",
                "/x pool=db capacity=2",
            ],
            &["--route", "pool"],
        ),
    ];
    all_refused(
        cases
            .iter()
            .filter_map(|(args, names)| refused(args, names).err())
            .collect(),
    );
}

#[test]
fn bad_pools_in_a_routes_file_exit_2_naming_the_file_and_line() {
    // (file text, the lines that may be named — the table's or the key's —, the bad part)
    let route_db = "\n[[route]]\npath = \"/a\"\npool = \"db\"\n";
    let cases: Vec<(String, &[usize], &str)> = vec![
        ("[[route]]\npath = \"/a\"\npool = \"nope\"\n".into(), &[1, 3], "nope"),
        (
            format!("[[pool]]\nname = \"db\"\ncapacity = 1\n\n[[pool]]\nname = \"db\"\ncapacity = 2\n{route_db}"),
            &[5, 6],
            "db",
        ),
        (format!("[[pool]]\nname = \"db\"\ncapacity = 0\n{route_db}"), &[1, 3], "capacity"),
        ("[[route]]\npath = \"/a\"\nqueue = 5\n".into(), &[1, 3], "queue"),
        (
            format!("[[pool]]\nname = \"db\"\ncapacity = 1\nshed = \"teapot\"\n{route_db}"),
            &[1, 4],
            "teapot",
        ),
        ("[[route]]\npath = \"/a\"\ndelay = \"inflight:x:y\"\n".into(), &[1, 3], "inflight:x:y"),
        (
            "[[pool]]\nname = \"db\"\ncapacity = 1\n\n[[route]]\npath = \"/a\"\npool = \"db\"\ncapacity = 2\n".into(),
            &[5, 7, 8],
            "pool",
        ),
    ];
    let mut failures = Vec::new();
    for (i, (text, lines, bad)) in cases.iter().enumerate() {
        let path = scratch_dir("pools", &format!("bad-{i}")).join("routes.toml");
        std::fs::write(&path, text).unwrap();
        let file = path.to_str().unwrap();
        match refused(&["--routes", file], &[bad]) {
            Ok(line) if lines.iter().any(|l| line.contains(&format!("{file}:{l}"))) => {}
            Ok(line) => failures.push(format!("{text:?} should name {file}:{lines:?}: {line}")),
            Err(e) => failures.push(format!("{text:?}: {e}")),
        }
    }
    all_refused(failures);
}
