//! STUB: precise sleeps.
use std::time::Duration;

pub async fn sleep(d: Duration) {
    tokio::time::sleep(d).await
}
