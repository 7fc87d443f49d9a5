// trainer-app.mjs: the installed package's Trainer in Node (a worker thread): events, abort after
// step 5 and resume from the checkpoint, pause and resume, both bit for bit (tiny.js trainerRuns).
// Prints one JSON line.
import { train, readSafetensorsHeader } from 'vitrine';
import { trainerRuns } from './tiny.js';

console.log(JSON.stringify(await trainerRuns(train, readSafetensorsHeader)));
