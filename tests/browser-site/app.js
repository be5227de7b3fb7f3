// The site's ES module: imports lib.js, fetches data.json, instantiates tiny.wasm with
// instantiateStreaming (which insists on Content-Type: application/wasm), and records the outcome in
// window.appResult (and #status) for the browser tests to read.
import { greeting } from "./lib.js";

async function run() {
  const data = await (await fetch("/data.json")).json();
  const wasm = await WebAssembly.instantiateStreaming(fetch("/tiny.wasm"));
  return {
    greeting,
    answer: data.answer,
    wasm: wasm.instance instanceof WebAssembly.Instance,
    path: location.pathname,
  };
}

run().then(
  (result) => {
    window.appResult = result;
    document.getElementById("status").textContent = "ready";
  },
  (error) => {
    window.appResult = { error: String(error) };
    document.getElementById("status").textContent = "failed";
  },
);
