// Files a run holds: those its question carried (the run's `files`: file_data parts naming
// where their bytes are stored) and those its steps stored (a tool's image or document, listed
// in the step's result). Their bytes come from GET /runs/{id}/files/{sha256}, read with fetch
// (so the token goes with it) into a blob URL, kept per file while the page lives: an image
// shows as a thumbnail, any file has a download link.

import { ApiFailure, h, headers, say } from "./ui.js";

const fileUrls = new Map();

// A stored file's URI ends in its SHA-256 and its size (files/<sha256>-<size>); a file passed
// by a caller's URI names no digest, and the deployment holds no bytes of it.
const STORED_NAME = /\/files\/([0-9a-f]{64})-(\d+)$/;

// The run's question files, each as a tool's stored file is described ({uri, mime_type, name,
// sha256, size}); sha256 and size are null for a file the question passed by its URI.
export function questionFiles(run) {
  const found = [];
  for (const part of run.files || []) {
    const data = part.file_data || part.fileData;
    if (!data) continue;
    const uri = data.file_uri || data.fileUri || "";
    const stored = STORED_NAME.exec(uri);
    found.push({ uri, mime_type: data.mime_type || data.mimeType || "",
      name: data.display_name || data.displayName || null,
      sha256: stored ? stored[1] : null, size: stored ? Number(stored[2]) : null });
  }
  return found;
}

// The files the run's steps stored, by URI: what a function response's parts name.
export function storedFiles(run) {
  const byUri = new Map();
  for (const step of run.steps || []) {
    for (const file of step.result?.response?.files || []) byUri.set(file.uri, file);
  }
  return byUri;
}

function fileUrl(runId, file) {
  const key = `${runId}/${file.sha256}`;
  if (!fileUrls.has(key)) {
    fileUrls.set(key, fetch(`/runs/${encodeURIComponent(runId)}/files/${file.sha256}`,
      { headers: headers() }).then((response) => {
      if (!response.ok) {
        throw new ApiFailure(response.status, `${response.status} for ${file.name || file.sha256}`);
      }
      return response.blob();
    }).then((blob) => URL.createObjectURL(blob)).catch((error) => {
      fileUrls.delete(key);
      throw error;
    }));
  }
  return fileUrls.get(key);
}

// A link that saves the file under its name: its bytes are read when it is first followed (an
// image's, already read for its thumbnail, at once).
function downloadLink(runId, file, label) {
  const link = h("a", { class: "file-download", href: "#", download: file.name || file.sha256,
    "aria-label": `Download ${label}`, dataset: { sha256: file.sha256 } }, "Download");
  const ready = (url) => { link.href = url; };
  link.addEventListener("click", (event) => {
    if (link.href.startsWith("blob:")) return;  // the browser saves it
    event.preventDefault();
    fileUrl(runId, file).then((url) => { ready(url); link.click(); })
      .catch((error) => say(error.message));
  });
  return [link, ready];
}

// A thumbnail for an image, a link that opens any other file; a download link for both. A
// file passed by a caller's URI is named, with no bytes to show.
export function fileView(runId, file) {
  const shown = file.name || (file.sha256 || file.uri).slice(0, 12);
  if (!file.sha256) {
    return h("figure", { class: "file external" }, h("figcaption", {}, `${shown} (${
      file.mime_type}), passed by its URI: `, h("code", {}, file.uri)));
  }
  const label = `${shown} (${file.mime_type}, ${file.size} bytes)`;
  const [download, ready] = downloadLink(runId, file, label);
  if (file.mime_type.startsWith("image/")) {
    const img = h("img", { class: "thumbnail", alt: label, title: label,
      dataset: { sha256: file.sha256 } });
    fileUrl(runId, file).then((url) => { img.src = url; ready(url); })
      .catch(() => { img.alt = `${label}: not available`; });
    return h("figure", { class: "file" }, img, h("figcaption", {}, label, download));
  }
  const link = h("a", { class: "file-link", href: "#", dataset: { sha256: file.sha256 },
    onclick: (event) => {
      event.preventDefault();
      fileUrl(runId, file).then((url) => window.open(url, "_blank", "noopener"))
        .catch((error) => say(error.message));
    } }, label);
  return h("figure", { class: "file" }, link, download);
}

// The files one function response carries: its parts' stored files, then those its response
// names but the model was not shown ({"file": name, ...}).
export function responseFiles(response, byUri) {
  const found = [];
  for (const part of response.parts || []) {
    const data = part.file_data || part.fileData;
    const file = data && byUri.get(data.file_uri || data.fileUri);
    if (file) found.push(file);
  }
  const named = new Set();
  const walk = (value) => {
    if (Array.isArray(value)) value.forEach(walk);
    else if (value && typeof value === "object") {
      if (typeof value.file === "string" && value.note) named.add(value.file);
      Object.values(value).forEach(walk);
    }
  };
  walk(response.response);
  for (const file of byUri.values()) {
    if (named.has(file.name) && !found.includes(file)) found.push(file);
  }
  return found;
}
