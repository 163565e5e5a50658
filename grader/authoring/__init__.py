"""What an assignment is: its spec (frozen, validated at load), oracles' API, inputs, trap texts, mutant corpus,
course seed, and the tools that write assignments. Part of the model: may import the model's leaves (results,
seeds, trap ids, backends) only; nothing of judging/, running/, publishing/, operations/ or cli/."""
