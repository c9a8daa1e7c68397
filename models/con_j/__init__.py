"""Con-J: an LLM-as-a-judge trained by DPO on its own contrastive judgments (rationale + verdict),
compared with a scalar Bradley-Terry reward model trained on the same preference pairs."""
