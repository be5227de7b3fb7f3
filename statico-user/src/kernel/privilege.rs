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
    use anyhow::anyhow;
    use nix::unistd::{setgid, setuid};
    let user = lookup(name)?;
    hand_over(user.uid.as_raw(), user.gid.as_raw())?;
    let failed = |what: &str, e: nix::Error| anyhow!("cannot switch to user {name}: {what}: {e}");
    set_groups(&user).map_err(|e| failed("initgroups", e))?;
    setgid(user.gid).map_err(|e| failed("setgid", e))?;
    setuid(user.uid).map_err(|e| failed("setuid", e))?;
    Ok(())
}

/// `--user NAME` names a user this system knows (checked while starting, before anything listens, so
/// a wrong name is a flag error, exit code 2, and `--check` finds it); Windows refuses `--user`.
pub fn check_user(user: Option<&str>) -> Result<()> {
    match user {
        #[cfg(unix)]
        Some(name) => lookup(name).map(|_| ()),
        #[cfg(windows)]
        Some(_) => anyhow::bail!(
            "--user is not supported on Windows: run statico as the account it should serve as"
        ),
        None => Ok(()),
    }
}

/// `name` in the system's user database (`getpwnam_r`: NSS users too).
#[cfg(unix)]
fn lookup(name: &str) -> Result<nix::unistd::User> {
    use anyhow::{anyhow, Context};
    nix::unistd::User::from_name(name)
        .with_context(|| format!("--user {name}: cannot read the user database"))?
        .ok_or_else(|| anyhow!("--user {name}: no such user; pass an existing user (e.g. nobody)"))
}

/// The user's supplementary groups (see the module doc for why not none).
#[cfg(all(unix, not(target_vendor = "apple")))]
fn set_groups(user: &nix::unistd::User) -> nix::Result<()> {
    let name = std::ffi::CString::new(user.name.as_str()).map_err(|_| nix::Error::EINVAL)?;
    nix::unistd::initgroups(&name, user.gid)
}

/// macOS: nix offers no `initgroups` there; libc's takes the group as an `int`.
#[cfg(target_vendor = "apple")]
fn set_groups(user: &nix::unistd::User) -> nix::Result<()> {
    let name = std::ffi::CString::new(user.name.as_str()).map_err(|_| nix::Error::EINVAL)?;
    // SAFETY: `name` is a NUL-terminated string alive for the call; initgroups only reads it.
    let done = unsafe { libc::initgroups(name.as_ptr(), user.gid.as_raw() as libc::c_int) };
    nix::Error::result(done).map(|_| ())
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

/// Runs `f` with file access checked as `user`'s, when statico runs as root and will switch to
/// `user` (`--user`): what it reads is what that user could read, as nginx's workers open files as
/// their user. Linux: on a thread of its own, whose filesystem uid and gid and supplementary groups
/// are set with raw syscalls that change that thread only (the kernel clears its file capabilities
/// as its filesystem uid leaves 0); threads it starts inherit them. Elsewhere, or unprivileged, `f`
/// runs as it is (after the switch, SIGHUP rebuilds run as the user anyway).
pub fn read_as<T: Send>(user: Option<&str>, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    #[cfg(target_os = "linux")]
    if let Some(name) = user.filter(|_| nix::unistd::geteuid().is_root()) {
        let account = account(name)?;
        return std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    become_reader(&account)?;
                    f()
                })
                .join()
                .map_err(|_| anyhow::anyhow!("reading as {name}: the thread panicked"))?
        });
    }
    let _ = user;
    f()
}

/// A user's ids and groups, from the system's user database.
#[cfg(target_os = "linux")]
struct Account {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

#[cfg(target_os = "linux")]
fn account(name: &str) -> Result<Account> {
    use anyhow::Context;
    let user = lookup(name)?;
    let cname = std::ffi::CString::new(name)?;
    let groups = nix::unistd::getgrouplist(&cname, user.gid)
        .with_context(|| format!("--user {name}: cannot read its groups"))?;
    Ok(Account {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups: groups.iter().map(|g| g.as_raw()).collect(),
    })
}

/// This thread's file access becomes `account`'s (see [`read_as`]).
#[cfg(target_os = "linux")]
fn become_reader(account: &Account) -> Result<()> {
    // SAFETY: raw `setgroups` changes only the calling thread's groups (glibc's wrapper would change
    // every thread's); the pointer and length describe `account.groups`, alive for the call.
    let set = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            account.groups.len(),
            account.groups.as_ptr(),
        )
    };
    if set != 0 {
        anyhow::bail!(
            "cannot read as uid {}: setgroups: {}",
            account.uid,
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: setfsgid/setfsuid change only this thread's filesystem ids; they return the previous
    // id, so a second call with the same id reads back whether the first took.
    let (gid, uid) = unsafe {
        libc::setfsgid(account.gid);
        libc::setfsuid(account.uid);
        (libc::setfsgid(account.gid), libc::setfsuid(account.uid))
    };
    if gid as u32 != account.gid || uid as u32 != account.uid {
        anyhow::bail!(
            "cannot read as uid {}: setfsuid/setfsgid refused",
            account.uid
        );
    }
    Ok(())
}
