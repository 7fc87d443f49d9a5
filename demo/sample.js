// sample.js: the demo's built-in Fashion-MNIST sample (made by prepare-data.mjs under
// build/demo-data/), fetched by the trainer worker (MAE / AIM data) and by the page (the classify
// mode's "Fashion-MNIST sample" classes): { name, n, chans: 1, size: 28, pixels, labels, classes }.
export async function fetchFmnistSample() {
  const base = new URL('../build/demo-data/', import.meta.url);
  const get = async (file, what) => {
    const r = await fetch(new URL(file, base));
    if (!r.ok)
      throw new Error(
        `Fashion-MNIST sample missing (${file}: HTTP ${r.status}): run node demo/serve.mjs, which prepares it`,
      );
    return what === 'json' ? r.json() : r.arrayBuffer();
  };
  const [meta, px, lb] = await Promise.all([
    get('fmnist-sample.json', 'json'),
    get('fmnist-sample.bin'),
    get('fmnist-sample-labels.bin'),
  ]);
  return {
    name: 'fashion-mnist sample',
    n: meta.n,
    chans: 1,
    size: meta.width,
    pixels: new Uint8Array(px),
    labels: new Uint8Array(lb),
    classes: meta.classes,
  };
}
