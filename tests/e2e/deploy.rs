//! The systemd units and the arguments file in `deploy/`: `systemd-analyze verify` accepts them,
//! `systemd-analyze security` rates the service's exposure at 3.0 or lower, and the shipped arguments
//! pass `statico --check`.

use std::path::PathBuf;
use std::process::Command;

fn deploy(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file)
}

/// The units with `/usr/bin/statico` pointing at the binary under test, in a scratch directory.
fn units_here() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("statico-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = std::fs::canonicalize(statico_tests::binary()).unwrap();
    for unit in ["statico.service", "statico@.service"] {
        let text = std::fs::read_to_string(deploy(unit)).unwrap();
        let text = text.replace("/usr/bin/statico", binary.to_str().unwrap());
        std::fs::write(dir.join(unit), text).unwrap();
    }
    dir
}

#[test]
fn systemd_accepts_the_units_and_rates_the_service_exposure_ok() {
    let dir = units_here();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.join("statico.service"))
        .arg(dir.join("statico@.service"))
        .output()
        .expect("systemd-analyze");
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(dir.join("statico.service"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for statico.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level:\n{text}"));
    assert!(level <= 3.0, "exposure {level}:\n{text}");
}

#[test]
fn the_shipped_arguments_pass_check() {
    let text = std::fs::read_to_string(deploy("statico.default")).unwrap();
    let args = text
        .lines()
        .find_map(|l| l.strip_prefix("STATICO_ARGS=\""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("STATICO_ARGS=\"…\"");
    // The same flags on free ports (8080 and 9100 may be taken on a test machine).
    let args: Vec<&str> = args
        .split(' ')
        .map(|a| match a {
            "8080" => "0",
            "127.0.0.1:9100" => "127.0.0.1:0",
            a => a,
        })
        .collect();
    let mut with_check = vec!["--check"];
    with_check.extend(args);
    let (code, err) = statico_tests::run_to_exit(&with_check);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("statico: check: OK"), "{err}");
}
