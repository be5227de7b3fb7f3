// Imported by app.js: a second ES module the browser fetches.
export const greeting = "hello from lib.js";
