//! Benchmark peer: actix-web 4 with one worker (the bench pins it to a CPU), answering every request
//! with "Hello, World!" as text/plain. Usage: peer-actix PORT
use actix_web::{web, App, HttpResponse, HttpServer};

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).expect("usage: peer-actix PORT");
    HttpServer::new(|| {
        App::new().default_service(web::to(|| async {
            HttpResponse::Ok().content_type("text/plain").body("Hello, World!")
        }))
    })
    .workers(1)
    .backlog(4096)
    .max_connections(100_000)
    .bind(("127.0.0.1", port))?
    .run()
    .await
}
