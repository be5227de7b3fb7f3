//! Dropping privileges once start-up is done: `--user NAME`, and the capabilities a root start had.
//!
//! Binding a low port, raising limits and loading BPF programs need root or capabilities; serving
//! needs none. So after the listeners, the BPF state and the metrics listener exist, and before any
//! worker starts (threads inherit credentials), statico:
//! 1. looks the user up in the system's user database with `getpwnam_r` (nix's [`User::from_name`]),
//!    so users that come from NSS rather than `/etc/passwd` — LDAP, systemd's `DynamicUser=` and
//!    userdb — are found;
//! 2. lets the caller hand over what must follow the user (the pinned BPF maps are chowned to it);
//! 3. sets the supplementary groups with `initgroups`: the user's own groups, as nginx's workers and
//!    sshd do — root's groups are gone, and a site readable through a group the user is in (e.g.
//!    `www-data`) stays readable; clearing them would make such a site unreadable for no gain;
//! 4. `setgid`, then `setuid` (in that order: after `setuid` a non-root user may not change its
//!    group);
//! 5. on Linux, clears every capability set that survives a `setuid` (effective, permitted,
//!    inheritable, and the ambient set), with or without `--user`: a server started as root without
//!    `--user` keeps uid 0 but no capability.
//!
//! Every Unix build does 1–4 (the BSDs and macOS are compile-checked here); Windows has no users to
//! switch to and refuses `--user` in one line.

use anyhow::Result;

/// Switches to `user` (if given) and drops every capability; `hand_over(uid, gid)` runs first, while
/// still privileged. Returns the line that says who statico runs as, if anything changed.
#[cfg(unix)]
pub fn drop(
    user: Option<&str>,
    hand_over: impl FnOnce(u32, u32) -> Result<()>,
) -> Result<Option<String>> {
    // Read before switching: `setuid` away from root clears them by itself.
    let had_capabilities = has_capabilities();
    if let Some(name) = user {
        switch_user(name, hand_over)?;
    }
    drop_capabilities()?;
    Ok(match (user, had_capabilities) {
        (Some(name), _) => Some(format!("running as {name} with no capabilities")),
        (None, true) => Some("running with no capabilities".into()),
        (None, false) => None,
    })
}

#[cfg(windows)]
pub fn drop(user: Option<&str>, _: impl FnOnce(u32, u32) -> Result<()>) -> Result<Option<String>> {
    match user {
        Some(_) => anyhow::bail!(
            "--user is not supported on Windows: run statico as the account it should serve as"
        ),
        None => Ok(None),
    }
}

/// Looks `name` up, hands over, sets its groups, gid and uid.
#[cfg(unix)]
fn switch_user(name: &str, hand_over: impl FnOnce(u32, u32) -> Result<()>) -> Result<()> {
    use anyhow::{anyhow, Context};
    use nix::unistd::{setgid, setuid, User};
    let user = User::from_name(name)
        .with_context(|| format!("--user {name}: cannot read the user database"))?
        .ok_or_else(|| {
            anyhow!("--user {name}: no such user; pass an existing user (e.g. nobody)")
        })?;
    hand_over(user.uid.as_raw(), user.gid.as_raw())?;
    let failed = |what: &str, e: nix::Error| anyhow!("cannot switch to user {name}: {what}: {e}");
    set_groups(&user).map_err(|e| failed("initgroups", e))?;
    setgid(user.gid).map_err(|e| failed("setgid", e))?;
    setuid(user.uid).map_err(|e| failed("setuid", e))?;
    Ok(())
}

/// The user's supplementary groups (see the module doc for why not none).
#[cfg(all(unix, not(target_vendor = "apple")))]
fn set_groups(user: &nix::unistd::User) -> nix::Result<()> {
    let name = std::ffi::CString::new(user.name.as_str()).map_err(|_| nix::Error::EINVAL)?;
    nix::unistd::initgroups(&name, user.gid)
}

/// macOS: groups come from Directory Services per process; nix offers no `initgroups` there, and
/// `setgid`/`setuid` below still leave root's identity.
#[cfg(target_vendor = "apple")]
fn set_groups(_: &nix::unistd::User) -> nix::Result<()> {
    Ok(())
}

/// Whether this process holds any capability (a root or capability-granted start).
#[cfg(target_os = "linux")]
fn has_capabilities() -> bool {
    use caps::CapSet;
    [CapSet::Effective, CapSet::Permitted, CapSet::Ambient]
        .into_iter()
        .any(|set| caps::read(None, set).is_ok_and(|c| !c.is_empty()))
}

/// Clears every capability set that survives `setuid`.
#[cfg(target_os = "linux")]
fn drop_capabilities() -> Result<()> {
    use caps::CapSet;
    caps::clear(None, CapSet::Ambient)
        .map_err(|e| anyhow::anyhow!("cannot drop capabilities: {e}"))?;
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        caps::clear(None, set).map_err(|e| anyhow::anyhow!("cannot drop capabilities: {e}"))?;
    }
    Ok(())
}

/// Only Linux has capabilities.
#[cfg(all(unix, not(target_os = "linux")))]
fn has_capabilities() -> bool {
    false
}

#[cfg(all(unix, not(target_os = "linux")))]
fn drop_capabilities() -> Result<()> {
    Ok(())
}
